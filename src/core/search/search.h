// Graph search on a TSDG graph (Wang, Wang, Zhao, 2022, section 4, the NSG-style best-first
// search on the CPU) with the optional GGNN slack stop rule (Groh et al., 2023,
// section 4.1.2). Two front ends share one candidate pool:
//  - GraphSearch, the incremental state machine behind tsdg_search_*: the caller
//    owns the storage and feeds distances in, so the visited set cannot know the
//    node count in advance;
//  - CpuSearchIndex, the in-memory path over a graph and rows held in memory,
//    batched over the thread pool, with no allocation per query.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "backend.h"
#include "distance.h"
#include "entry_points.h"
#include "navigating_layer.h"
#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// GGNN's stop rule: stop once the nearest unexpanded candidate is farther than
// d_best_k + tau * min(d_best_1, d_nn1+). Distances are the metric's comparison
// distances; for squared L2 the rule is applied to their square roots, as in
// the paper. For inner product, whose distances can be negative, the slack
// uses |d_best_1|.
struct SlackRule {
  float tau = 0.0f;  // 0 disables the rule
  int k = 10;
  float nn1_bound = std::numeric_limits<float>::infinity();  // d_nn1+, same unit as distances
  bool squared = false;

  bool enabled() const { return tau > 0.0f; }
  // True when a candidate at distance d can no longer improve the k best.
  bool stops(float d, float best_1, float best_k) const;
};

SlackRule slack_rule_for(Metric metric, float tau, int k, float nn1_bound);

// d_nn1+ of Groh et al., 2023 for a graph: the largest distance from a node to its
// nearest neighbor, which heads its list (never occluded, so λ = 0 and first
// by distance). Absolute value, so that the slack stays non-negative. On
// control's pool when it has one: each node's row and its neighbor's are a
// cache miss apiece.
float graph_nn1_bound(MatrixView data, GraphView graph, Metric metric,
                      const RunControl& control = RunControl{});

// The node nearest target (by distance) reachable from start by repeated moves
// to the nearest closer neighbor; for placing entry points and bridges.
uint32_t greedy_descent(MatrixView data, GraphView graph, const float* target, uint32_t start,
                        DistanceFn distance);

// The rows [first, end) that the search for their own vector does not reach:
// the walk of CpuSearchIndex and of GraphSearch as the index pages drive it
// (pool of ef, edges with λ <= lambda_limit, no stop rule, started from
// entries), stopped as soon as it computes the row's distance. A merge keeps
// these few exact, so that a row just merged is always found. Ascending, on
// control's pool.
// With a layer, each walk starts from what the layer's walk for the row's
// vector finds instead of from entries, as the searches of an index with
// that layer do.
std::vector<uint32_t> unreached_rows(MatrixView data, GraphView graph, Metric metric,
                                     const uint32_t* entries, int entry_count, int64_t first,
                                     int64_t end, int ef, int lambda_limit,
                                     const RunControl& control, NavigatingLayer* layer = nullptr);

// Rounds of UnreachedCheck::repair for a merge: a second round gives the
// rows whose first edge went to a list another edge changed a new one.
constexpr int kUnreachedRepairRounds = 2;

// The expanded nodes UnreachedCheck keeps by default, in all: 256 MiB, so
// that the check of a merge of millions of rows stays bounded; past the
// budget a walk is not kept, and a repair walks its row again.
constexpr int64_t kMaxRecordedExpansions = int64_t{64} << 20;

// Called with a node just before a repair writes its list. Lists that
// another process reads while they are repaired (the worker's, in a merge's
// shared segment) are marked changed there first: a list that differs is
// then marked, even when the process dies between the two writes.
using BeforeListChange = std::function<void(uint32_t node)>;

// unreached_rows that can then repair the graph for the rows not reached. A
// walk that misses its row has still expanded every node of its pool, the
// nearest one found first among them: an edge from that node to the row
// makes the walk reach it, as long as no list the walk read before changed.
// So the check keeps the nodes each walk expanded; the repair adds those
// edges, and walks again only the rows not reached and those whose walk
// expanded a node whose list changed (every other walk reads the same lists
// as before, so it still reaches its row). The graph's arrays are the
// caller's and must stay as they are between run() and repair(), and until
// the check is destroyed.
class UnreachedCheck {
 public:
  // The rows checked: rows (any order, duplicates once), or [first, end).
  // record_budget: the expanded nodes it keeps in all; a walk past it is not
  // kept, and a repair walks its row again. layer: null, or the layer the
  // walks start from (unreached_rows).
  UnreachedCheck(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries, int entry_count,
                 std::vector<uint32_t> rows, int ef, int lambda_limit,
                 int64_t record_budget = kMaxRecordedExpansions, std::shared_ptr<NavigatingLayer> layer = nullptr);
  UnreachedCheck(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries, int entry_count,
                 int64_t first, int64_t end, int ef, int lambda_limit,
                 int64_t record_budget = kMaxRecordedExpansions, std::shared_ptr<NavigatingLayer> layer = nullptr);
  ~UnreachedCheck();
  UnreachedCheck(const UnreachedCheck&) = delete;
  UnreachedCheck& operator=(const UnreachedCheck&) = delete;

  // Walks every row; unreached() then holds those not reached.
  void run(const RunControl& control);
  // For each row not reached, an edge into it in the list of the node its
  // walk found nearest it: inserted in the list's (λ, distance) order with
  // its λ counted as stage 2 counts it, the last entry not added here
  // dropped when the list is full. The row that entry pointed to lost an
  // edge into it: it joins the rows checked. Rows whose edge would be past
  // the walk's λ limit stay as they are. Up to `rounds` rounds, each
  // followed by the walks it can change. graph holds the arrays given at
  // construction, now writable. Returns the nodes whose lists changed,
  // ascending.
  std::vector<uint32_t> repair(GraphSpan graph, int rounds, const RunControl& control,
                               const BeforeListChange& before_change = {});
  // After run(): the lists of nodes changed (by another check's repair):
  // walks again the rows not reached and those whose walk read one of them.
  void lists_changed(const std::vector<uint32_t>& nodes, const RunControl& control);
  // After run(): the rows of rows not checked yet join the check and are
  // walked.
  void check_too(const std::vector<uint32_t>& rows, const RunControl& control);
  // The rows not reached, ascending.
  const std::vector<uint32_t>& unreached() const { return unreached_; }
  // The rows checked, ascending.
  const std::vector<uint32_t>& rows() const { return rows_; }
  int64_t nodes() const { return graph_.nodes; }

 private:
  void walk_rows(const std::vector<uint32_t>& rows, const RunControl& control);
  // The place of a checked row in rows_ and the per-row arrays.
  size_t slot(uint32_t row) const;

  MatrixView data_;
  GraphView graph_;
  DistanceFn distance_;
  std::vector<uint32_t> entries_;
  std::shared_ptr<NavigatingLayer> layer_;
  std::vector<uint32_t> rows_;  // the rows checked, ascending
  int ef_, lambda_limit_;
  int64_t record_budget_;
  std::vector<std::vector<uint32_t>> expanded_;  // per row checked: its walk's expanded nodes
  std::vector<uint8_t> unrecorded_;  // per row: its walk was past the records' budget, walked again after a repair
  std::atomic<int64_t> recorded_{0};
  std::vector<uint32_t> nearest_found_;  // per row: its walk's nearest node, for a row not reached
  std::vector<uint32_t> unreached_;
};


// The repair of a merge's rows at two ef: rows reached at the merging
// session's ef can still be missed by a narrower search, so a merge also
// repairs the rows a
// search at this ef misses, a LIMIT 10 search's narrowest pool.
constexpr int kRepairNarrowEf = 10;

// The checks of a merge's repair at ef: wide at ef and, when ef is wider
// than kRepairNarrowEf, narrow at kRepairNarrowEf (else null), of the same
// graph and rows. record_budget: the expanded nodes they keep in all, each
// at most kMaxRecordedExpansions.
struct RepairChecks {
  RepairChecks(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries, int entry_count,
               const std::vector<uint32_t>& rows, int ef, int lambda_limit,
               int64_t record_budget = 2 * kMaxRecordedExpansions,
               const std::shared_ptr<NavigatingLayer>& layer = nullptr);
  void run(const RunControl& control);
  // After run(): narrow's repair, which wide is told of (its lists and the
  // rows it added to its check), then wide's; the nodes whose lists
  // changed, ascending.
  std::vector<uint32_t> repair(GraphSpan graph, const RunControl& control,
                               const BeforeListChange& before_change = {});

  std::unique_ptr<UnreachedCheck> narrow;
  std::unique_ptr<UnreachedCheck> wide;
};

// SearchParams::gpu_kernel of the GPU's small-batch kernel (a beam search,
// which single queries take), and of its large-batch kernel, which walks as
// the CPU does (one expansion at a time from the same entries).
constexpr int kGpuKernelSmallBatch = 1;
constexpr int kGpuKernelWalkingAsTheCpu = 2;

// index->unreached_rows after UnreachedCheck's repair for a search index,
// of the rows [first, end) and also_rows (ascending, outside that range):
// on the CPU exactly that (its check is the walk UnreachedCheck records);
// on a GPU, whose kernels' walks are not recorded, otherwise. The rows that
// the large-batch kernel misses (also_rows looked up by its searches) each
// get an edge from the nearest other node that the CPU's walk from the
// index's entry points finds for them, which is where that kernel's walk
// ends too; the index takes the changed lists (lists_changed), and the
// answer, ascending, is its full check (both kernels) of [first, end) on
// the repaired graph, with both kernels' searches for also_rows and for the
// rows whose in-edge a repair edge displaced. graph: the host arrays the index was made from, now
// writable, with data its rows. found gets how many the first check
// missed; changed the nodes whose lists changed, also when the index then
// throws; before_change sees each of them before its list is written.
std::vector<uint32_t> unreached_rows_repaired(SearchIndex& index, MatrixView data, GraphSpan graph, Metric metric,
                                              const SearchParams& params, int64_t first, int64_t end,
                                              int64_t& found, std::vector<uint32_t>& changed,
                                              const RunControl& control, const BeforeListChange& before_change,
                                              const std::vector<uint32_t>& also_rows = {});

// The pool of the walks with which a build checks its graph: narrower than
// any search's, so that the rows behind weak routes are found too.
constexpr int kBuildCheckEf = 4;

// The passes of a build's check: each after the first walks again, on the
// lists the one before linked, the rows it missed (through the rows it
// linked, those it left unlinked are meant to be reached) and the rows
// whose edge it dropped.
constexpr int kBuildCheckPasses = 2;

// The rows a build checks at most: past them, every m-th row, the fewest
// rows in m that keep to this count. A row's walk scores the whole
// navigating set, which grows with the rows, so a check of every row would
// grow faster than the build; the misses among the rows checked mark the
// regions a search reaches poorly, and their edges link those regions.
constexpr int64_t kBuildCheckRows = 1000000;

// A build's check of its graph: every row (every m-th past max_rows) is
// searched for its own vector with a pool of kBuildCheckEf from the index's
// entry points (the GPU's large-batch kernel, which walks as the CPU does),
// and each row missed gets an edge from the nearest other node that the
// walk finds (unreached_rows_repaired's edge), unless a row linked from
// that node is nearer to it than the node is: the check's next pass
// (kBuildCheckPasses) links it where it still is missed. A diversified
// k-NN graph is only as navigable as its long edges make it; the closer
// GNND's lists come to the exact ones, the more of those edges it replaces
// with near ones, and a search that starts in the wrong region stays there.
// Routes checked row by row put back the routes to the rows themselves: the
// check is the search-based construction of NSG (Fu et al., 2019) and
// Vamana (Subramanya et al., 2019) reduced to the routes that fail. A query
// beside a linked row may still start in a region without such a route,
// which is why a more accurate k-NN graph can still search worse at low ef
// (docs/design.md, the navigating set). The walks run on a search
// index of backend's. Returns the rows that got an edge: none under inner
// product, and none past the pass at which the device had no room for the
// index. max_rows: kBuildCheckRows, or another bound in a test.
// before_change sees each node before its list changes (a merge marks the
// lists it has to write again). rows: what the build left of data on the
// backend's device, if anything, for the index to take over. only_rows:
// null, or the rows to check instead of every row (every m-th of them past
// max_rows). layer: the graph's navigating layer (build_navigating_layer of
// data), which the walks then start from, as the searches do: a route
// checked from the navigating set is one a search from the layer need not
// take, and a merged graph of separated clusters keeps too few others.
// Empty (no nodes): the walks start from the navigating set.
int64_t link_rows_missed_by_narrow_walks(Backend& backend, MatrixView data, Metric metric, GraphSpan graph,
                                         const RunControl& control, int64_t max_rows = kBuildCheckRows,
                                         const BeforeListChange& before_change = {},
                                         std::unique_ptr<DeviceRows> rows = nullptr,
                                         const std::vector<uint32_t>* only_rows = nullptr,
                                         GraphView layer = GraphView{});
inline int64_t link_rows_missed_by_narrow_walks(Backend& backend, MatrixView data, Metric metric, TsdgGraph& graph,
                                                const RunControl& control, int64_t max_rows = kBuildCheckRows,
                                                std::unique_ptr<DeviceRows> rows = nullptr) {
  return link_rows_missed_by_narrow_walks(backend, data, metric, GraphSpan::of(graph), control, max_rows, {},
                                          std::move(rows));
}

// The bounded best-first candidate list: the ef best (distance, id) pairs seen,
// ascending, each marked once expanded.
class CandidatePool {
 public:
  struct Entry {
    float dist;
    uint32_t id;
    bool expanded;
  };

  void reset(int capacity);
  int capacity() const { return capacity_; }
  int size() const { return size_; }
  const Entry& operator[](int i) const { return entries_[i]; }

  // Inserts unless full and not better than the worst. When an entry leaves
  // the pool (the old worst, or the offered one when rejected) it is written
  // to *dropped, if dropped is not null, and true is returned through
  // *has_dropped.
  void insert(uint32_t id, float dist, Entry* dropped, bool* has_dropped);
  // insert() without reporting what leaves: the in-memory search's hot path.
  void push(uint32_t id, float dist) {
    if (size_ == capacity_) {
      const Entry& worst = entries_[size_ - 1];
      if (dist > worst.dist || (dist == worst.dist && id >= worst.id)) return;
      --size_;
    }
    int at = size_;
    while (at > 0 && (entries_[at - 1].dist > dist ||
                      (entries_[at - 1].dist == dist && entries_[at - 1].id > id))) {
      entries_[at] = entries_[at - 1];
      --at;
    }
    entries_[at] = Entry{dist, id, false};
    ++size_;
    if (at < first_unexpanded_) first_unexpanded_ = at;
  }
  // The id pop_nearest_unexpanded would return next, ignoring the stop rule
  // (for prefetching); kInvalidId when none is left.
  uint32_t peek_unexpanded() const {
    for (int i = first_unexpanded_; i < size_; ++i) {
      if (!entries_[i].expanded) return entries_[i].id;
    }
    return kInvalidId;
  }
  // The nearest unexpanded entry, marked expanded; kInvalidId when none is left
  // or the slack rule says stop.
  uint32_t pop_nearest_unexpanded(const SlackRule& slack);
  // Raises the capacity; entries stay.
  void grow(int capacity);
  size_t memory_bytes() const { return entries_.capacity() * sizeof(Entry); }

 private:
  std::vector<Entry> entries_;
  int capacity_ = 0;
  int size_ = 0;
  int first_unexpanded_ = 0;
};

// The incremental search of tsdg_search_*. The visited set is an
// open-addressing hash set, since the node count is unknown; every candidate
// that ever left the pool is kept, so widen() can continue where a narrower
// search stopped.
class GraphSearch {
 public:
  GraphSearch(int lambda_limit, float slack);

  // Stop-rule context; k = 10 and d_nn1+ = infinity until set.
  void set_slack_context(Metric metric, int k, float nn1_bound);

  void begin(int ef);
  void widen(int ef);
  void offer(uint32_t id, float dist);
  // offer() of each, with room for all of them made at once: a navigating
  // set of tens of thousands of entries would otherwise grow the visited
  // set and the spilled candidates by doubling, query after query.
  void offer_many(const uint32_t* ids, const float* dists, int64_t count);
  uint32_t next();
  // Writes the ids of the list that pass the λ filter and were not seen yet
  // to fresh, marks them seen, and returns how many.
  int unvisited(const uint32_t* ids, const uint8_t* lambdas, int count, uint32_t* fresh);
  int results(uint32_t* ids, float* dists, int max_results) const;
  int64_t distance_count() const { return distance_count_; }
  // What the visited set and the candidates (in the pool and spilled) hold.
  size_t memory_bytes() const;

 private:
  class IdSet {
   public:
    void clear();
    bool insert(uint32_t id);  // false when already present
    void reserve(size_t more);  // room for more ids without a rehash
    size_t memory_bytes() const { return slots_.capacity() * sizeof(uint32_t); }

   private:
    void rehash(size_t capacity);
    std::vector<uint32_t> slots_;
    size_t used_ = 0;
  };

  int lambda_limit_;
  SlackRule slack_;
  CandidatePool pool_;
  IdSet seen_;
  std::vector<CandidatePool::Entry> spilled_;  // candidates that left the pool
  int64_t distance_count_ = 0;
};

// The in-memory search over rows and a graph held in memory (the CPU
// backend's SearchIndex). Entry points: the navigating set of params
// (NavigatingSetCache), scanned in full by every query.
// Thread-safe.
class CpuSearchIndex : public SearchIndex {
 public:
  CpuSearchIndex(MatrixView data, GraphView graph, Metric metric);
  ~CpuSearchIndex() override;

  void search(MatrixView queries, const SearchParams& params, uint32_t* ids, float* dists,
              const RunControl& control) override;
  // search(), returning the distances its walks computed (the layer's
  // included): distance_computations() sums those of every caller.
  int64_t search_counted(MatrixView queries, const SearchParams& params, uint32_t* ids, float* dists,
                         const RunControl& control);
  size_t memory_bytes() const override;
  int64_t node_count() const override { return graph_.nodes; }
  std::vector<uint32_t> entry_points(const SearchParams& params,
                                     const RunControl& control) override;
  std::vector<uint32_t> unreached_rows(int64_t first, int64_t end, const SearchParams& params,
                                       const RunControl& control) override;
  void lists_changed(const std::vector<uint32_t>& nodes) override;
  void set_layer(GraphView layer) override;
  std::shared_ptr<NavigatingLayer> navigating_layer() const override { return current_layer(); }

  // Distance computations of every search so far, the layer's walks included.
  int64_t distance_computations() const;
  // d_nn1+ of the graph: the largest distance from a node to its nearest kept neighbor.
  float nn1_bound() const override { return nn1_bound_; }

 private:
  struct Scratch;
  std::unique_ptr<Scratch> acquire_scratch();
  void release_scratch(std::unique_ptr<Scratch> scratch);
  void prepare_entry_points(const SearchParams& params, const RunControl& control = RunControl{});
  // The distances of count (at most kEntryBlock) queries to every entry,
  // into entry_dists (a query's after another). For L2 and inner product
  // they come from a matrix product (||q||^2 + ||e||^2 - 2 q.e), whose
  // rounding can differ from distance_'s: search_one scores the entries it
  // keeps again.
  void score_entries(const float* const* queries, int count, Scratch& scratch) const;
  bool scores_entries_by_product() const { return metric_ == Metric::L2 || metric_ == Metric::InnerProduct; }
  // The search of one query from its distances to the entries.
  int64_t search_one(const float* query, const float* entry_dists, const SearchParams& params,
                     const SlackRule& slack, Scratch& scratch, uint32_t* ids, float* dists) const;
  // The search of one query from the layer's entries for it (count of them).
  int64_t search_from(const float* query, const uint32_t* entry_ids, const float* entry_dists, int count,
                      const SearchParams& params, const SlackRule& slack, Scratch& scratch, uint32_t* ids,
                      float* dists) const;
  // The walk from the pool of scratch, its entries in it.
  int64_t walk(const float* query, const SearchParams& params, const SlackRule& slack, Scratch& scratch,
               uint32_t* ids, float* dists) const;
  // search() through the layer.
  int64_t search_through_layer(NavigatingLayer& layer, MatrixView queries, const SearchParams& params,
                               const SlackRule& slack, uint32_t* ids, float* dists, const RunControl& control);
  std::shared_ptr<NavigatingLayer> current_layer() const;

  MatrixView data_;
  GraphView graph_;
  Metric metric_;
  DistanceFn distance_;
  float nn1_bound_;

  mutable std::mutex mutex_;  // guards the two caches below
  std::vector<std::unique_ptr<Scratch>> free_scratch_;
  Matrix entry_rows_;  // the entries' rows side by side, so scanning them stays in cache
  // For L2 and inner product: the entries' rows packed for dot_tiles, and
  // their squared norms (L2), so that a block of queries scores them all by
  // one matrix product.
  std::vector<float> entry_panels_;
  std::vector<float> entry_norms_;
  NavigatingSetCache navigating_;
  std::shared_ptr<NavigatingLayer> layer_;  // null: the navigating set scored whole

  std::atomic<int64_t> distance_computations_{0};
};

}  // namespace tsdg
