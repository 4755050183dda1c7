#include "search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>

#include "entry_points.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

bool entry_less(float dist_a, uint32_t id_a, float dist_b, uint32_t id_b) {
  return dist_a < dist_b || (dist_a == dist_b && id_a < id_b);
}

void validate_search_params(const SearchParams& params) {
  if (params.k <= 0) throw Error(Status::InvalidArgument, "search k must be positive");
  if (params.ef <= 0) throw Error(Status::InvalidArgument, "search ef must be positive");
  if (params.lambda_limit < 0) {
    throw Error(Status::InvalidArgument, "search lambda_limit must not be negative");
  }
  if (!(params.slack >= 0.0f)) throw Error(Status::InvalidArgument, "search slack must be >= 0");
  if (params.entry_samples <= 0) {
    throw Error(Status::InvalidArgument, "search entry_samples must be positive");
  }
}

}  // namespace

// ---- stop rule ----

bool SlackRule::stops(float d, float best_1, float best_k) const {
  if (squared) {
    const float root_best_1 = std::sqrt(std::max(best_1, 0.0f));
    const float slack = tau * std::min(root_best_1, std::sqrt(std::max(nn1_bound, 0.0f)));
    return std::sqrt(std::max(d, 0.0f)) > std::sqrt(std::max(best_k, 0.0f)) + slack;
  }
  return d > best_k + tau * std::min(std::fabs(best_1), nn1_bound);
}

SlackRule slack_rule_for(Metric metric, float tau, int k, float nn1_bound) {
  SlackRule rule;
  rule.tau = tau;
  rule.k = std::max(1, k);
  rule.nn1_bound = nn1_bound;
  rule.squared = metric == Metric::L2;
  return rule;
}

float graph_nn1_bound(MatrixView data, GraphView graph, Metric metric, const RunControl& control) {
  constexpr int64_t kNodesPerChunk = 16384;
  const DistanceFn distance = metric_distance_fn(metric);
  std::vector<float> bounds(worker_count(control), 0.0f);
  parallel_for(control, graph.nodes, kNodesPerChunk, [&](int64_t begin, int64_t end, int worker) {
    float bound = bounds[worker];
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t nearest = graph.list(i)[0];
      if (nearest == kInvalidId) continue;
      bound = std::max(bound, std::fabs(distance(data.row(i), data.row(nearest), data.dim)));
    }
    bounds[worker] = bound;
  });
  return *std::max_element(bounds.begin(), bounds.end());
}

uint32_t greedy_descent(MatrixView data, GraphView graph, const float* target, uint32_t start,
                        DistanceFn distance) {
  uint32_t current = start;
  float current_dist = distance(target, data.row(current), data.dim);
  for (;;) {
    uint32_t best = current;
    const uint32_t* list = graph.list(current);
    for (int j = 0; j < graph.degree && list[j] != kInvalidId; ++j) {
      const float d = distance(target, data.row(list[j]), data.dim);
      if (d < current_dist) {
        current_dist = d;
        best = list[j];
      }
    }
    if (best == current) return current;  // strictly decreasing, so this ends
    current = best;
  }
}

// ---- candidate pool ----

void CandidatePool::reset(int capacity) {
  capacity_ = std::max(1, capacity);
  if (static_cast<int>(entries_.size()) < capacity_) entries_.resize(capacity_);
  size_ = 0;
  first_unexpanded_ = 0;
}

void CandidatePool::grow(int capacity) {
  if (capacity <= capacity_) return;
  capacity_ = capacity;
  if (static_cast<int>(entries_.size()) < capacity_) entries_.resize(capacity_);
}

void CandidatePool::insert(uint32_t id, float dist, Entry* dropped, bool* has_dropped) {
  if (has_dropped) *has_dropped = false;
  if (size_ == capacity_) {
    const Entry& worst = entries_[size_ - 1];
    if (!entry_less(dist, id, worst.dist, worst.id)) {
      if (dropped) {
        *dropped = Entry{dist, id, false};
        *has_dropped = true;
      }
      return;
    }
    if (dropped) {
      *dropped = worst;
      *has_dropped = true;
    }
    --size_;
  }
  // Binary search for the first entry after (dist, id).
  int lo = 0;
  int hi = size_;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (entry_less(dist, id, entries_[mid].dist, entries_[mid].id)) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  std::memmove(&entries_[lo + 1], &entries_[lo], sizeof(Entry) * (size_ - lo));
  entries_[lo] = Entry{dist, id, false};
  ++size_;
  if (lo < first_unexpanded_) first_unexpanded_ = lo;
}

uint32_t CandidatePool::pop_nearest_unexpanded(const SlackRule& slack) {
  while (first_unexpanded_ < size_ && entries_[first_unexpanded_].expanded) ++first_unexpanded_;
  if (first_unexpanded_ >= size_) return kInvalidId;
  Entry& next = entries_[first_unexpanded_];
  if (slack.enabled() && size_ >= slack.k &&
      slack.stops(next.dist, entries_[0].dist, entries_[slack.k - 1].dist)) {
    return kInvalidId;
  }
  next.expanded = true;
  ++first_unexpanded_;
  return next.id;
}

// ---- incremental search ----

void GraphSearch::IdSet::clear() {
  if (used_ == 0) return;
  std::fill(slots_.begin(), slots_.end(), kInvalidId);
  used_ = 0;
}

void GraphSearch::IdSet::rehash(size_t capacity) {
  std::vector<uint32_t> old;
  old.swap(slots_);
  slots_.assign(capacity, kInvalidId);
  used_ = 0;
  for (uint32_t id : old) {
    if (id != kInvalidId) insert(id);
  }
}

bool GraphSearch::IdSet::insert(uint32_t id) {
  if ((used_ + 1) * 2 > slots_.size()) rehash(std::max<size_t>(1024, slots_.size() * 2));
  const size_t mask = slots_.size() - 1;
  size_t slot = (static_cast<uint64_t>(id) * 0x9E3779B97F4A7C15ull >> 32) & mask;
  while (slots_[slot] != kInvalidId) {
    if (slots_[slot] == id) return false;
    slot = (slot + 1) & mask;
  }
  slots_[slot] = id;
  ++used_;
  return true;
}

GraphSearch::GraphSearch(int lambda_limit, float slack) : lambda_limit_(lambda_limit) {
  slack_.tau = slack;
}

void GraphSearch::set_slack_context(Metric metric, int k, float nn1_bound) {
  slack_ = slack_rule_for(metric, slack_.tau, k, nn1_bound);
}

void GraphSearch::begin(int ef) {
  pool_.reset(ef);
  seen_.clear();
  spilled_.clear();
  distance_count_ = 0;
}

void GraphSearch::widen(int ef) {
  const int old_capacity = pool_.capacity();
  if (ef <= old_capacity) return;
  pool_.grow(ef);
  // The caller consumed the old ef results and wants the next ones, so the
  // stop rule now guards that many.
  slack_.k = std::max(slack_.k, old_capacity);
  // Everything that ever left the pool is no better than what is in it, so
  // the best spilled candidates fill the new room in order.
  std::sort(spilled_.begin(), spilled_.end(),
            [](const CandidatePool::Entry& a, const CandidatePool::Entry& b) {
              return entry_less(a.dist, a.id, b.dist, b.id);
            });
  const size_t room = static_cast<size_t>(ef - pool_.size());
  const size_t moved = std::min(room, spilled_.size());
  for (size_t i = 0; i < moved; ++i) {
    pool_.insert(spilled_[i].id, spilled_[i].dist, nullptr, nullptr);
  }
  spilled_.erase(spilled_.begin(), spilled_.begin() + moved);
}

void GraphSearch::offer(uint32_t id, float dist) {
  ++distance_count_;
  seen_.insert(id);
  CandidatePool::Entry dropped;
  bool has_dropped = false;
  pool_.insert(id, dist, &dropped, &has_dropped);
  if (has_dropped) spilled_.push_back(dropped);
}

uint32_t GraphSearch::next() { return pool_.pop_nearest_unexpanded(slack_); }

int GraphSearch::unvisited(const uint32_t* ids, const uint8_t* lambdas, int count,
                           uint32_t* fresh) {
  int found = 0;
  for (int i = 0; i < count; ++i) {
    if (ids[i] == kInvalidId || lambdas[i] > lambda_limit_) continue;
    if (seen_.insert(ids[i])) fresh[found++] = ids[i];
  }
  return found;
}

int GraphSearch::results(uint32_t* ids, float* dists, int max_results) const {
  const int count = std::min(max_results, pool_.size());
  for (int i = 0; i < count; ++i) {
    ids[i] = pool_[i].id;
    dists[i] = pool_[i].dist;
  }
  return count;
}

// ---- in-memory search ----

namespace {

// Visited marks for one worker: a tag per node, bumped per query, so starting
// a query costs nothing until the tags wrap around.
class VisitedTable {
 public:
  explicit VisitedTable(int64_t nodes) : tags_(static_cast<size_t>(nodes), 0) {}
  void next_query() {
    if (++current_ == 0) {
      std::fill(tags_.begin(), tags_.end(), 0);
      current_ = 1;
    }
  }
  bool mark(uint32_t id) {
    if (tags_[id] == current_) return false;
    tags_[id] = current_;
    return true;
  }
  size_t bytes() const { return tags_.size() * sizeof(uint16_t); }

 private:
  std::vector<uint16_t> tags_;
  uint16_t current_ = 0;
};

void prefetch_row(const float* row, int dim) {
  const char* bytes = reinterpret_cast<const char*>(row);
  const int lines = static_cast<int>((static_cast<size_t>(dim) * sizeof(float) + 63) / 64);
  for (int line = 0; line < lines; ++line) __builtin_prefetch(bytes + 64 * line, 0, 3);
}

}  // namespace

namespace {

// One walk of unreached_rows: true once it computes row's distance. The
// rows of a node's new neighbors are prefetched before their distances are
// computed; the pool takes them in list order, so the walk is the scans'.
// A walk that does not reach its row ends with every node of its pool
// expanded: *nearest gets the first of them (kInvalidId for an empty
// graph). expanded, when not null, gets the nodes the walk expanded.
// With stop_at_row false the walk passes the row by, as if it were not in
// the graph, and always ends with *nearest: the nearest other node it found.
bool walk_reaches(MatrixView data, GraphView graph, DistanceFn distance, const uint32_t* entries,
                  int entry_count, uint32_t row, int lambda_limit, VisitedTable& visited,
                  CandidatePool& pool, std::vector<uint32_t>& fresh, std::vector<uint32_t>* expanded,
                  uint32_t* nearest, bool stop_at_row = true) {
  const float* query = data.row(row);
  const SlackRule no_stop_rule;
  visited.next_query();
  pool.reset(pool.capacity());
  if (expanded != nullptr) expanded->clear();
  visited.mark(row);  // offered only by the checks below
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i] == row && stop_at_row) return true;
    prefetch_row(data.row(entries[i]), data.dim);
  }
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i] == row) continue;
    visited.mark(entries[i]);
    pool.push(entries[i], distance(query, data.row(entries[i]), data.dim));
  }
  fresh.resize(graph.degree);
  uint32_t node;
  while ((node = pool.pop_nearest_unexpanded(no_stop_rule)) != kInvalidId) {
    if (expanded != nullptr) expanded->push_back(node);
    const uint32_t* list = graph.list(node);
    const uint8_t* lambdas = graph.list_lambdas(node);
    int count = 0;
    for (int j = 0; j < graph.degree; ++j) {
      const uint32_t neighbor = list[j];
      if (neighbor == kInvalidId || lambdas[j] > lambda_limit) break;
      if (neighbor == row && stop_at_row) return true;
      if (!visited.mark(neighbor)) continue;
      prefetch_row(data.row(neighbor), data.dim);
      fresh[count++] = neighbor;
    }
    for (int j = 0; j < count; ++j) pool.push(fresh[j], distance(query, data.row(fresh[j]), data.dim));
  }
  *nearest = pool.size() > 0 ? pool[0].id : kInvalidId;
  return false;
}

void check_walk_arguments(MatrixView data, GraphView graph, const uint32_t* entries, int entry_count,
                          int64_t first, int64_t end, int ef) {
  if (data.rows != graph.nodes) {
    throw Error(Status::InvalidArgument, "unreached rows: row count and node count differ");
  }
  if (first < 0 || first > end || end > data.rows) {
    throw Error(Status::InvalidArgument, "unreached rows: rows out of range");
  }
  if (ef < 1) throw Error(Status::InvalidArgument, "unreached rows: ef must be positive");
  for (int i = 0; i < entry_count; ++i) {
    if (entries[i] >= data.rows) {
      throw Error(Status::InvalidArgument, "unreached rows: an entry point is out of range");
    }
  }
}

// The walks of `count` rows (row_at(i)) on control's pool; on_missed(i,
// worker, nearest) for each row not reached; expanded_of(i), when it
// returns a vector, gets the nodes walk i expanded.
// after_walk(i), when given, runs after walk i (to keep or drop its record).
template <typename RowAt, typename ExpandedOf, typename OnMissed, typename AfterWalk = void (*)(int64_t)>
void walk_rows_on_pool(MatrixView data, GraphView graph, DistanceFn distance, const std::vector<uint32_t>& entries,
                       int64_t count, int ef, int lambda_limit, const RunControl& control, RowAt row_at,
                       ExpandedOf expanded_of, OnMissed on_missed, bool stop_at_row = true,
                       AfterWalk after_walk = [](int64_t) {}) {
  const int workers = worker_count(control);
  std::vector<std::unique_ptr<VisitedTable>> visited(workers);
  std::vector<CandidatePool> pools(workers);
  std::vector<std::vector<uint32_t>> fresh(workers);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(64, count / (4 * workers)));
  parallel_for(control, count, chunk, [&](int64_t begin, int64_t stop, int worker) {
    if (!visited[worker]) {
      visited[worker] = std::make_unique<VisitedTable>(data.rows);
      pools[worker].reset(ef);
    }
    for (int64_t i = begin; i < stop; ++i) {
      uint32_t nearest = kInvalidId;
      if (!walk_reaches(data, graph, distance, entries.data(), static_cast<int>(entries.size()), row_at(i),
                        lambda_limit, *visited[worker], pools[worker], fresh[worker], expanded_of(i), &nearest,
                        stop_at_row)) {
        on_missed(i, worker, nearest);
      }
      after_walk(i);
    }
  });
}

}  // namespace

std::vector<uint32_t> unreached_rows(MatrixView data, GraphView graph, Metric metric,
                                     const uint32_t* entries, int entry_count, int64_t first,
                                     int64_t end, int ef, int lambda_limit,
                                     const RunControl& control) {
  check_walk_arguments(data, graph, entries, entry_count, first, end, ef);
  std::vector<std::vector<uint32_t>> missed(worker_count(control));
  walk_rows_on_pool(
      data, graph, metric_distance_fn(metric), std::vector<uint32_t>(entries, entries + entry_count), end - first, ef,
      lambda_limit, control, [first](int64_t i) { return static_cast<uint32_t>(first + i); },
      [](int64_t) { return static_cast<std::vector<uint32_t>*>(nullptr); },
      [&](int64_t i, int worker, uint32_t) { missed[worker].push_back(static_cast<uint32_t>(first + i)); });
  std::vector<uint32_t> rows;
  for (const std::vector<uint32_t>& part : missed) rows.insert(rows.end(), part.begin(), part.end());
  std::sort(rows.begin(), rows.end());
  return rows;
}

UnreachedCheck::UnreachedCheck(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries,
                               int entry_count, int64_t first, int64_t end, int ef, int lambda_limit,
                               int64_t record_budget)
    : data_(data), graph_(graph), distance_(metric_distance_fn(metric)), first_(first), end_(end), ef_(ef),
      lambda_limit_(lambda_limit), record_budget_(record_budget) {
  check_walk_arguments(data, graph, entries, entry_count, first, end, ef);
  entries_.assign(entries, entries + entry_count);
}

UnreachedCheck::~UnreachedCheck() = default;

void UnreachedCheck::walk_rows(const std::vector<uint32_t>& rows, const RunControl& control) {
  std::vector<std::vector<uint32_t>> missed(worker_count(control));
  // a record replaced gives its share of the budget back
  for (uint32_t row : rows) {
    std::vector<uint32_t>& walk = expanded_[row - first_];
    recorded_ -= static_cast<int64_t>(walk.size());
    std::vector<uint32_t>().swap(walk);
  }
  walk_rows_on_pool(
      data_, graph_, distance_, entries_, static_cast<int64_t>(rows.size()), ef_, lambda_limit_, control,
      [&](int64_t i) { return rows[i]; },
      [&](int64_t i) {
        // the row's previous record is gone: kept again when the budget allows
        unrecorded_[rows[i] - first_] = 0;
        return &expanded_[rows[i] - first_];
      },
      [&](int64_t i, int worker, uint32_t nearest) {
        nearest_found_[rows[i] - first_] = nearest;
        missed[worker].push_back(rows[i]);
      },
      true, [&](int64_t i) {
        std::vector<uint32_t>& walk = expanded_[rows[i] - first_];
        if (recorded_.fetch_add(static_cast<int64_t>(walk.size())) + static_cast<int64_t>(walk.size()) <=
            record_budget_) {
          return;
        }
        recorded_ -= static_cast<int64_t>(walk.size());
        std::vector<uint32_t>().swap(walk);
        unrecorded_[rows[i] - first_] = 1;
      });
  std::vector<uint32_t> still;
  for (const std::vector<uint32_t>& part : missed) still.insert(still.end(), part.begin(), part.end());
  std::sort(still.begin(), still.end());
  // rows not walked again keep their outcome
  std::vector<uint32_t> kept;
  std::set_difference(unreached_.begin(), unreached_.end(), rows.begin(), rows.end(), std::back_inserter(kept));
  unreached_.clear();
  std::merge(kept.begin(), kept.end(), still.begin(), still.end(), std::back_inserter(unreached_));
}

void UnreachedCheck::run(const RunControl& control) {
  expanded_.assign(end_ - first_, {});
  unrecorded_.assign(end_ - first_, 0);
  recorded_ = 0;
  nearest_found_.assign(end_ - first_, kInvalidId);
  unreached_.clear();
  std::vector<uint32_t> rows(end_ - first_);
  for (int64_t i = 0; i < end_ - first_; ++i) rows[i] = static_cast<uint32_t>(first_ + i);
  walk_rows(rows, control);
}

namespace {

// Inserts row into node's list (graph's lists sorted by (λ, distance)) with
// the λ stage 2 would give it among the list, unless that is past
// lambda_limit; a full list drops its last entry that is not pinned. Returns
// whether it inserted.
bool insert_repair_edge(MatrixView data, GraphSpan graph, DistanceFn distance, uint32_t node, uint32_t row,
                        int lambda_limit, const std::vector<uint32_t>& pinned,
                        const BeforeListChange& before_change) {
  const int degree = graph.degree;
  uint32_t* list = graph.list(node);
  uint8_t* lambdas = graph.list_lambdas(node);
  const float d = distance(data.row(node), data.row(row), data.dim);
  std::vector<float> dists(degree, std::numeric_limits<float>::infinity());
  int size = 0;
  int lambda = 0;
  for (; size < degree && list[size] != kInvalidId; ++size) {
    if (list[size] == row) return false;
    dists[size] = distance(data.row(node), data.row(list[size]), data.dim);
    if (dists[size] < d && distance(data.row(list[size]), data.row(row), data.dim) < d) ++lambda;
  }
  if (lambda > lambda_limit || lambda > 255) return false;
  int drop = -1;  // the entry a full list drops
  if (size == degree) {
    drop = degree - 1;
    while (drop >= 0 && std::find(pinned.begin(), pinned.end(), list[drop]) != pinned.end()) --drop;
    if (drop < 0) return false;
  }
  if (before_change) before_change(node);
  if (drop >= 0) {
    for (int j = drop; j + 1 < size; ++j) {
      list[j] = list[j + 1];
      lambdas[j] = lambdas[j + 1];
      dists[j] = dists[j + 1];
    }
    --size;
  }
  int at = size;
  while (at > 0 && (lambdas[at - 1] > lambda || (lambdas[at - 1] == lambda && dists[at - 1] > d))) {
    list[at] = list[at - 1];
    lambdas[at] = lambdas[at - 1];
    --at;
  }
  list[at] = row;
  lambdas[at] = static_cast<uint8_t>(lambda);
  return true;
}

// The ids in either of two ascending lists, ascending.
std::vector<uint32_t> sorted_union(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  std::vector<uint32_t> both;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both;
}

// An edge into each of rows from nearest_of(row) (insert_repair_edge),
// rows in order. edges holds the (node, row) edges added so far, which
// later insertions keep; it gains the new ones. Returns the nodes whose
// lists changed, ascending.
template <typename NearestOf>
std::vector<uint32_t> insert_repair_edges(MatrixView data, GraphSpan graph, DistanceFn distance,
                                          const std::vector<uint32_t>& rows, NearestOf nearest_of, int lambda_limit,
                                          std::vector<std::pair<uint32_t, uint32_t>>& edges,
                                          const BeforeListChange& before_change) {
  std::vector<uint32_t> changed;
  for (uint32_t row : rows) {
    const uint32_t node = nearest_of(row);
    if (node == kInvalidId) continue;
    std::vector<uint32_t> pinned;
    for (const auto& [at, to] : edges) {
      if (at == node) pinned.push_back(to);
    }
    if (!insert_repair_edge(data, graph, distance, node, row, lambda_limit, pinned, before_change)) continue;
    edges.emplace_back(node, row);
    changed.push_back(node);
  }
  std::sort(changed.begin(), changed.end());
  changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
  return changed;
}

}  // namespace

std::vector<uint32_t> unreached_rows_repaired(SearchIndex& index, MatrixView data, GraphSpan graph, Metric metric,
                                              const SearchParams& params, int64_t first, int64_t end,
                                              int64_t& found, std::vector<uint32_t>& changed,
                                              const RunControl& control, const BeforeListChange& before_change) {
  const GraphView view{graph.neighbors, graph.lambdas, graph.nodes, graph.degree};
  const std::vector<uint32_t> entries = index.entry_points(params, control);
  check_walk_arguments(data, view, entries.data(), static_cast<int>(entries.size()), first, end, params.ef);
  const int narrow_ef = std::min(params.ef, kRepairNarrowEf);
  changed.clear();
  if (index.device_rows() == nullptr) {
    // the CPU index's check is the walk UnreachedCheck records: the repair
    // then walks again only the walks it can change
    RepairChecks checks(data, view, metric, entries.data(), static_cast<int>(entries.size()), first, end,
                        params.ef, params.lambda_limit);
    checks.run(control);
    found = static_cast<int64_t>(checks.wide->unreached().size());
    changed = checks.repair(graph, control, before_change);
    return checks.wide->unreached();
  }
  // The rows the large-batch kernel misses at ef and at the narrow ef, each
  // given its edge from where the CPU's walk ends at the narrower ef of the
  // two at which the kernel misses it.
  SearchParams walk_as_cpu = params;
  walk_as_cpu.gpu_kernel = kGpuKernelWalkingAsTheCpu;
  std::vector<uint32_t> missed = index.unreached_rows(first, end, walk_as_cpu, control);
  found = static_cast<int64_t>(missed.size());
  std::vector<uint32_t> narrow;
  if (narrow_ef < params.ef) {
    walk_as_cpu.ef = narrow_ef;
    narrow = index.unreached_rows(first, end, walk_as_cpu, control);
    missed = sorted_union(missed, narrow);
  }
  const DistanceFn distance = metric_distance_fn(metric);
  std::vector<uint32_t> nearest(missed.size(), kInvalidId);
  for (const bool at_narrow_ef : {true, false}) {
    const int ef = at_narrow_ef ? narrow_ef : params.ef;
    std::vector<uint32_t> rows;
    std::vector<size_t> at;
    for (size_t i = 0; i < missed.size(); ++i) {
      if (std::binary_search(narrow.begin(), narrow.end(), missed[i]) == at_narrow_ef) {
        rows.push_back(missed[i]);
        at.push_back(i);
      }
    }
    walk_rows_on_pool(
        data, view, distance, entries, static_cast<int64_t>(rows.size()), ef, params.lambda_limit, control,
        [&](int64_t i) { return rows[i]; }, [](int64_t) { return static_cast<std::vector<uint32_t>*>(nullptr); },
        [&](int64_t i, int, uint32_t node) { nearest[at[i]] = node; }, /*stop_at_row=*/false);
  }
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  changed = insert_repair_edges(
      data, graph, distance, missed,
      [&](uint32_t row) { return nearest[std::lower_bound(missed.begin(), missed.end(), row) - missed.begin()]; },
      params.lambda_limit, edges, before_change);
  if (!changed.empty()) index.lists_changed(changed);
  return index.unreached_rows(first, end, params, control);
}

void UnreachedCheck::lists_changed(const std::vector<uint32_t>& nodes, const RunControl& control) {
  if (nodes.empty()) return;
  std::vector<uint8_t> is_changed(data_.rows, 0);
  for (uint32_t node : nodes) is_changed[node] = 1;
  std::vector<uint32_t> again(unreached_);
  for (int64_t i = 0; i < end_ - first_; ++i) {
    const std::vector<uint32_t>& walk = expanded_[i];
    if (unrecorded_[i] != 0 ||
        std::any_of(walk.begin(), walk.end(), [&](uint32_t node) { return is_changed[node] != 0; })) {
      again.push_back(static_cast<uint32_t>(first_ + i));
    }
  }
  std::sort(again.begin(), again.end());
  again.erase(std::unique(again.begin(), again.end()), again.end());
  walk_rows(again, control);
}

std::vector<uint32_t> UnreachedCheck::repair(GraphSpan graph, int rounds, const RunControl& control,
                                             const BeforeListChange& before_change) {
  if (graph.neighbors != graph_.neighbors || graph.lambdas != graph_.lambdas || graph.degree != graph_.degree) {
    throw Error(Status::InvalidArgument, "unreached rows: repair of another graph than the one checked");
  }
  std::vector<uint32_t> changed;
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  for (int round = 0; round < rounds && !unreached_.empty(); ++round) {
    const std::vector<uint32_t> changed_now = insert_repair_edges(
        data_, graph, distance_, unreached_, [&](uint32_t row) { return nearest_found_[row - first_]; },
        lambda_limit_, edges, before_change);
    if (changed_now.empty()) break;
    lists_changed(changed_now, control);
    changed = sorted_union(changed, changed_now);
  }
  return changed;
}

RepairChecks::RepairChecks(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries,
                           int entry_count, int64_t first, int64_t end, int ef, int lambda_limit,
                           int64_t record_budget) {
  const bool with_narrow = ef > kRepairNarrowEf;
  const int64_t budget = std::min(kMaxRecordedExpansions, record_budget / (with_narrow ? 2 : 1));
  wide = std::make_unique<UnreachedCheck>(data, graph, metric, entries, entry_count, first, end, ef, lambda_limit,
                                          budget);
  if (with_narrow) {
    narrow = std::make_unique<UnreachedCheck>(data, graph, metric, entries, entry_count, first, end,
                                              kRepairNarrowEf, lambda_limit, budget);
  }
}

void RepairChecks::run(const RunControl& control) {
  if (narrow) narrow->run(control);
  wide->run(control);
}

std::vector<uint32_t> RepairChecks::repair(GraphSpan graph, const RunControl& control,
                                           const BeforeListChange& before_change) {
  std::vector<uint32_t> changed;
  if (narrow) {
    changed = narrow->repair(graph, kUnreachedRepairRounds, control, before_change);
    wide->lists_changed(changed, control);
  }
  return sorted_union(changed, wide->repair(graph, kUnreachedRepairRounds, control, before_change));
}

struct CpuSearchIndex::Scratch {
  Scratch(int64_t nodes, int degree, int dim) : visited(nodes), fresh(degree), query(dim) {}
  VisitedTable visited;
  CandidatePool pool;
  std::vector<uint32_t> fresh;
  std::vector<float> query;  // the normalized query, for cosine
};

CpuSearchIndex::CpuSearchIndex(MatrixView data, GraphView graph, Metric metric)
    : data_(data), graph_(graph), metric_(metric), distance_(metric_distance_fn(metric)) {
  if (data.rows != graph.nodes) {
    throw Error(Status::InvalidArgument, "search index: row count and node count differ");
  }
  if (graph.nodes > 0 && graph.degree <= 0) {
    throw Error(Status::InvalidArgument, "search index: degree must be positive");
  }
  if (graph.nodes >= static_cast<int64_t>(kInvalidId)) {
    throw Error(Status::InvalidArgument, "search index: too many nodes for 32-bit ids");
  }
  nn1_bound_ = graph_nn1_bound(data, graph, metric);
}

CpuSearchIndex::~CpuSearchIndex() = default;

size_t CpuSearchIndex::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t bytes = sizeof(*this) + entries_.size() * sizeof(uint32_t) +
                 entry_rows_.values.size() * sizeof(float) + payload_values_.size() + payload_flags_.size();
  for (const auto& scratch : free_scratch_) {
    bytes += scratch->visited.bytes() + scratch->fresh.size() * sizeof(uint32_t) +
             scratch->query.size() * sizeof(float);
  }
  return bytes;
}

std::unique_ptr<CpuSearchIndex::Scratch> CpuSearchIndex::acquire_scratch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_scratch_.empty()) {
      std::unique_ptr<Scratch> scratch = std::move(free_scratch_.back());
      free_scratch_.pop_back();
      return scratch;
    }
  }
  return std::make_unique<Scratch>(graph_.nodes, std::max(graph_.degree, 1), data_.dim);
}

void CpuSearchIndex::release_scratch(std::unique_ptr<Scratch> scratch) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_scratch_.push_back(std::move(scratch));
}

void CpuSearchIndex::prepare_entry_points(const SearchParams& params, const RunControl& control) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (entries_count_ == params.entry_samples && entries_seed_ == params.seed) return;
  entries_ = select_entry_points(data_, graph_, params.entry_samples, params.seed, control);
  entry_rows_ = Matrix(static_cast<int64_t>(entries_.size()), data_.dim);
  for (size_t i = 0; i < entries_.size(); ++i) {
    std::copy(data_.row(entries_[i]), data_.row(entries_[i]) + data_.dim, entry_rows_.row(i));
  }
  entries_count_ = params.entry_samples;
  entries_seed_ = params.seed;
}

int64_t CpuSearchIndex::search_one(const float* query, const SearchParams& params,
                                   const SlackRule& slack, Scratch& scratch, uint32_t* ids,
                                   float* dists) const {
  const int dim = data_.dim;
  const int degree = graph_.degree;
  const int lambda_limit = params.lambda_limit;
  VisitedTable& visited = scratch.visited;
  CandidatePool& pool = scratch.pool;
  uint32_t* fresh = scratch.fresh.data();
  visited.next_query();
  pool.reset(std::max(params.ef, params.k));

  const int64_t entry_count = static_cast<int64_t>(entries_.size());
  for (int64_t i = 0; i < entry_count; ++i) {
    visited.mark(entries_[i]);
    const float d = distance_(query, entry_rows_.row(i), dim);
    pool.push(entries_[i], d);
  }
  int64_t computed = entry_count;

  uint32_t node;
  while ((node = pool.pop_nearest_unexpanded(slack)) != kInvalidId) {
    const uint32_t* list = graph_.list(node);
    const uint8_t* lambdas = graph_.list_lambdas(node);
    int count = 0;
    // Lists are sorted by λ and padded at the end, so the first edge over the
    // limit or the first pad ends the usable prefix.
    for (int j = 0; j < degree; ++j) {
      const uint32_t neighbor = list[j];
      if (neighbor == kInvalidId || lambdas[j] > lambda_limit) break;
      if (!visited.mark(neighbor)) continue;
      fresh[count++] = neighbor;
      __builtin_prefetch(data_.row(neighbor), 0, 3);
    }
    if (count > 0) prefetch_row(data_.row(fresh[0]), dim);
    for (int i = 0; i < count; ++i) {
      if (i + 1 < count) prefetch_row(data_.row(fresh[i + 1]), dim);
      pool.push(fresh[i], distance_(query, data_.row(fresh[i]), dim));
    }
    computed += count;
    // The next node to expand is known now; its list is the next cache miss.
    const uint32_t next = pool.peek_unexpanded();
    if (next != kInvalidId) {
      __builtin_prefetch(graph_.list(next), 0, 3);
      __builtin_prefetch(graph_.list_lambdas(next), 0, 3);
    }
  }

  const int found = std::min(params.k, pool.size());
  for (int i = 0; i < found; ++i) {
    ids[i] = pool[i].id;
    dists[i] = pool[i].dist;
  }
  for (int i = found; i < params.k; ++i) {
    ids[i] = kInvalidId;
    dists[i] = std::numeric_limits<float>::infinity();
  }
  return computed;
}

void CpuSearchIndex::search(MatrixView queries, const SearchParams& params, uint32_t* ids,
                            float* dists, const RunControl& control) {
  validate_search_params(params);
  if (queries.rows == 0) return;
  if (queries.dim != data_.dim) {
    throw Error(Status::InvalidArgument, "search: query dimension " + std::to_string(queries.dim) +
                                             " does not match the index dimension " +
                                             std::to_string(data_.dim));
  }
  const int k = params.k;
  if (graph_.nodes == 0) {
    std::fill(ids, ids + queries.rows * k, kInvalidId);
    std::fill(dists, dists + queries.rows * k, std::numeric_limits<float>::infinity());
    return;
  }
  prepare_entry_points(params);
  const SlackRule slack = slack_rule_for(metric_, params.slack, k, nn1_bound_);
  const int workers = worker_count(control);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(64, queries.rows / (4 * workers)));
  control.set_total(queries.rows);
  parallel_for(control, queries.rows, chunk, [&](int64_t begin, int64_t end, int) {
    std::unique_ptr<Scratch> scratch = acquire_scratch();
    int64_t computed = 0;
    for (int64_t q = begin; q < end; ++q) {
      const float* query = queries.row(q);
      if (metric_ == Metric::Cosine) {
        std::copy(query, query + queries.dim, scratch->query.begin());
        normalize_rows(scratch->query.data(), 1, queries.dim);
        query = scratch->query.data();
      }
      computed += search_one(query, params, slack, *scratch, ids + q * k, dists + q * k);
    }
    distance_computations_.fetch_add(computed, std::memory_order_relaxed);
    control.add_done(end - begin);
    release_scratch(std::move(scratch));
  });
}

std::vector<uint32_t> CpuSearchIndex::unreached_rows(int64_t first, int64_t end,
                                                     const SearchParams& params,
                                                     const RunControl& control) {
  validate_search_params(params);
  prepare_entry_points(params, control);
  return tsdg::unreached_rows(data_, graph_, metric_, entries_.data(),
                              static_cast<int>(entries_.size()), first, end, params.ef,
                              params.lambda_limit, control);
}

std::vector<uint32_t> CpuSearchIndex::entry_points(const SearchParams& params,
                                                   const RunControl& control) {
  prepare_entry_points(params, control);
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_;
}

}  // namespace tsdg
