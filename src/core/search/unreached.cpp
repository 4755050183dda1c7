// The unreached-row checks and their repair: walks from the entry points
// that find the rows a search cannot reach, and the edges that make them
// reachable again (unreached_rows, UnreachedCheck, RepairChecks).
#include "search.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>

#include "entry_points.h"
#include "phase_trace.h"
#include "search_internal.h"
#include "thread_pool.h"

namespace tsdg {

using detail::prefetch_row;
using detail::VisitedTable;

namespace {

// One walk of unreached_rows: true once it computes row's distance. The
// rows of a node's new neighbors are prefetched before their distances are
// computed; the pool takes them in list order, so the walk is the scans'.
// A walk that does not reach its row ends with every node of its pool
// expanded: *nearest gets the first of them (kInvalidId for an empty
// graph). expanded, when not null, gets the nodes the walk expanded.
// With stop_at_row false the walk passes the row by, as if it were not in
// the graph, and always ends with *nearest: the nearest other node it found.
// entry_dists, when not null, are the entries' distances (a layer's walk
// gave them, padded with kInvalidId).
bool walk_reaches(MatrixView data, GraphView graph, DistanceFn distance, const uint32_t* entries,
                  const float* entry_dists, int entry_count, uint32_t row, int lambda_limit, VisitedTable& visited,
                  CandidatePool& pool, std::vector<uint32_t>& fresh, std::vector<uint32_t>* expanded,
                  uint32_t* nearest, bool stop_at_row = true) {
  if (entry_dists != nullptr) {
    while (entry_count > 0 && entries[entry_count - 1] == kInvalidId) --entry_count;
  }
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
    pool.push(entries[i],
              entry_dists != nullptr ? entry_dists[i] : distance(query, data.row(entries[i]), data.dim));
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

// The walks of `count` rows (row_at(i)) on control's pool, from entries or,
// where layer is not null, from what the layer's walk for the row's vector
// finds, as the searches of an index with that layer start; on_missed(i,
// worker, nearest) for each row not reached; expanded_of(i), when it
// returns a vector, gets the nodes walk i expanded.
// after_walk(i), when given, runs after walk i (to keep or drop its record).
template <typename RowAt, typename ExpandedOf, typename OnMissed, typename AfterWalk = void (*)(int64_t)>
void walk_rows_on_pool(MatrixView data, GraphView graph, DistanceFn distance, const std::vector<uint32_t>& entries,
                       NavigatingLayer* layer, int64_t count, int ef, int lambda_limit, const RunControl& control,
                       RowAt row_at, ExpandedOf expanded_of, OnMissed on_missed, bool stop_at_row = true,
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
    const int width = NavigatingLayer::width(ef);
    std::vector<uint32_t> layer_ids;
    std::vector<float> layer_dists;
    if (layer != nullptr) {
      Matrix queries(stop - begin, data.dim);
      for (int64_t i = begin; i < stop; ++i) {
        std::copy(data.row(row_at(i)), data.row(row_at(i)) + data.dim, queries.row(i - begin));
      }
      layer_ids.resize(static_cast<size_t>(queries.rows) * width);
      layer_dists.resize(layer_ids.size());
      RunControl on_this_thread;
      on_this_thread.cancel = control.cancel;
      layer->entries(queries.view(), ef, layer_ids.data(), layer_dists.data(), on_this_thread);
    }
    for (int64_t i = begin; i < stop; ++i) {
      uint32_t nearest = kInvalidId;
      const bool from_layer = layer != nullptr;
      const size_t at = static_cast<size_t>(i - begin) * width;
      if (!walk_reaches(data, graph, distance, from_layer ? layer_ids.data() + at : entries.data(),
                        from_layer ? layer_dists.data() + at : nullptr,
                        from_layer ? width : static_cast<int>(entries.size()), row_at(i), lambda_limit,
                        *visited[worker], pools[worker], fresh[worker], expanded_of(i), &nearest, stop_at_row)) {
        on_missed(i, worker, nearest);
      }
      after_walk(i);
    }
  });
}

std::vector<uint32_t> row_range(int64_t first, int64_t end) {
  std::vector<uint32_t> rows(std::max<int64_t>(0, end - first));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint32_t>(first + static_cast<int64_t>(i));
  return rows;
}

// rows ascending without duplicates, each checked to be a row of data.
std::vector<uint32_t> sorted_rows(std::vector<uint32_t> rows, int64_t count) {
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  if (!rows.empty() && rows.back() >= count) throw Error(Status::InvalidArgument, "unreached rows: rows out of range");
  return rows;
}

// The answers a device index's check of rows gives each (a reached row is
// first, or after rows just as near), and the rows it checks per search call.
constexpr int kOwnResults = 8;
constexpr int64_t kOwnRowsPerCall = 65536;

// The rows of rows (ascending) that a device index's search for their own
// vector misses, with the kernel params.gpu_kernel forces, or else with
// each kernel that serves params.ef (as SearchIndex::unreached_rows checks
// a range of rows), ascending. first_found, when not null, gets for each
// missed row the first answer of its search (kInvalidId where it had none);
// it needs params.gpu_kernel to name one kernel.
std::vector<uint32_t> kernel_misses(SearchIndex& index, MatrixView data, const std::vector<uint32_t>& rows,
                                    const SearchParams& params, const RunControl& control,
                                    std::vector<uint32_t>* first_found = nullptr) {
  if (first_found != nullptr && params.gpu_kernel == 0) {
    throw Error(Status::InvalidArgument, "unreached rows: the first answers of one kernel only");
  }
  if (first_found != nullptr) first_found->clear();
  std::vector<uint32_t> missed;
  SearchParams own = params;
  own.k = std::min(params.ef, kOwnResults);
  for (int64_t first = 0; first < static_cast<int64_t>(rows.size()); first += kOwnRowsPerCall) {
    const int64_t count = std::min<int64_t>(kOwnRowsPerCall, static_cast<int64_t>(rows.size()) - first);
    Matrix queries(count, data.dim);
    for (int64_t i = 0; i < count; ++i) {
      std::memcpy(queries.row(i), data.row(rows[first + i]), sizeof(float) * data.dim);
    }
    std::vector<uint32_t> ids(static_cast<size_t>(count) * own.k);
    std::vector<float> dists(ids.size());
    for (const int kernel : {kGpuKernelSmallBatch, kGpuKernelWalkingAsTheCpu}) {
      if (params.gpu_kernel != 0 && kernel != params.gpu_kernel) continue;
      if (kernel == kGpuKernelSmallBatch && params.ef > kGpuSmallBatchMaxEf) continue;
      own.gpu_kernel = kernel;
      index.search(queries.view(), own, ids.data(), dists.data(), control);
      for (int64_t i = 0; i < count; ++i) {
        const uint32_t* found = ids.data() + i * own.k;
        if (std::find(found, found + own.k, rows[first + i]) != found + own.k) continue;
        missed.push_back(rows[first + i]);
        if (first_found != nullptr) first_found->push_back(found[0]);
      }
    }
  }
  // one kernel over ascending rows leaves them ascending, first_found beside them
  if (first_found != nullptr) return missed;
  std::sort(missed.begin(), missed.end());
  missed.erase(std::unique(missed.begin(), missed.end()), missed.end());
  return missed;
}

}  // namespace

std::vector<uint32_t> unreached_rows(MatrixView data, GraphView graph, Metric metric,
                                     const uint32_t* entries, int entry_count, int64_t first,
                                     int64_t end, int ef, int lambda_limit,
                                     const RunControl& control, NavigatingLayer* layer) {
  check_walk_arguments(data, graph, entries, entry_count, first, end, ef);
  std::vector<std::vector<uint32_t>> missed(worker_count(control));
  walk_rows_on_pool(
      data, graph, metric_distance_fn(metric), std::vector<uint32_t>(entries, entries + entry_count), layer,
      end - first, ef,
      lambda_limit, control, [first](int64_t i) { return static_cast<uint32_t>(first + i); },
      [](int64_t) { return static_cast<std::vector<uint32_t>*>(nullptr); },
      [&](int64_t i, int worker, uint32_t) { missed[worker].push_back(static_cast<uint32_t>(first + i)); });
  std::vector<uint32_t> rows;
  for (const std::vector<uint32_t>& part : missed) rows.insert(rows.end(), part.begin(), part.end());
  std::sort(rows.begin(), rows.end());
  return rows;
}

UnreachedCheck::UnreachedCheck(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries,
                               int entry_count, std::vector<uint32_t> rows, int ef, int lambda_limit,
                               int64_t record_budget, std::shared_ptr<NavigatingLayer> layer)
    : data_(data), graph_(graph), distance_(metric_distance_fn(metric)), layer_(std::move(layer)), ef_(ef),
      lambda_limit_(lambda_limit), record_budget_(record_budget) {
  check_walk_arguments(data, graph, entries, entry_count, 0, data.rows, ef);
  rows_ = sorted_rows(std::move(rows), data.rows);
  entries_.assign(entries, entries + entry_count);
}

UnreachedCheck::UnreachedCheck(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries,
                               int entry_count, int64_t first, int64_t end, int ef, int lambda_limit,
                               int64_t record_budget, std::shared_ptr<NavigatingLayer> layer)
    : UnreachedCheck(data, graph, metric, entries, entry_count,
                     (check_walk_arguments(data, graph, entries, entry_count, first, end, ef), row_range(first, end)),
                     ef, lambda_limit, record_budget, std::move(layer)) {}

UnreachedCheck::~UnreachedCheck() = default;

size_t UnreachedCheck::slot(uint32_t row) const {
  return static_cast<size_t>(std::lower_bound(rows_.begin(), rows_.end(), row) - rows_.begin());
}

void UnreachedCheck::walk_rows(const std::vector<uint32_t>& rows, const RunControl& control) {
  std::vector<std::vector<uint32_t>> missed(worker_count(control));
  // a record replaced gives its share of the budget back
  for (uint32_t row : rows) {
    std::vector<uint32_t>& walk = expanded_[slot(row)];
    recorded_ -= static_cast<int64_t>(walk.size());
    std::vector<uint32_t>().swap(walk);
  }
  walk_rows_on_pool(
      data_, graph_, distance_, entries_, layer_.get(), static_cast<int64_t>(rows.size()), ef_, lambda_limit_, control,
      [&](int64_t i) { return rows[i]; },
      [&](int64_t i) {
        // the row's previous record is gone: kept again when the budget allows
        const size_t at = slot(rows[i]);
        unrecorded_[at] = 0;
        return &expanded_[at];
      },
      [&](int64_t i, int worker, uint32_t nearest) {
        nearest_found_[slot(rows[i])] = nearest;
        missed[worker].push_back(rows[i]);
      },
      true, [&](int64_t i) {
        const size_t at = slot(rows[i]);
        std::vector<uint32_t>& walk = expanded_[at];
        if (recorded_.fetch_add(static_cast<int64_t>(walk.size())) + static_cast<int64_t>(walk.size()) <=
            record_budget_) {
          return;
        }
        recorded_ -= static_cast<int64_t>(walk.size());
        std::vector<uint32_t>().swap(walk);
        unrecorded_[at] = 1;
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
  expanded_.assign(rows_.size(), {});
  unrecorded_.assign(rows_.size(), 0);
  recorded_ = 0;
  nearest_found_.assign(rows_.size(), kInvalidId);
  unreached_.clear();
  walk_rows(rows_, control);
}

void UnreachedCheck::check_too(const std::vector<uint32_t>& rows, const RunControl& control) {
  std::vector<uint32_t> added;
  for (uint32_t row : sorted_rows(rows, data_.rows)) {
    if (!std::binary_search(rows_.begin(), rows_.end(), row)) added.push_back(row);
  }
  if (added.empty()) return;
  // the per-row arrays in the order of the merged rows
  std::vector<uint32_t> all;
  std::merge(rows_.begin(), rows_.end(), added.begin(), added.end(), std::back_inserter(all));
  std::vector<std::vector<uint32_t>> expanded(all.size());
  std::vector<uint8_t> unrecorded(all.size(), 0);
  std::vector<uint32_t> nearest(all.size(), kInvalidId);
  for (size_t i = 0, j = 0; i < all.size(); ++i) {
    if (j < rows_.size() && rows_[j] == all[i]) {
      expanded[i].swap(expanded_[j]);
      unrecorded[i] = unrecorded_[j];
      nearest[i] = nearest_found_[j];
      ++j;
    }
  }
  rows_.swap(all);
  expanded_.swap(expanded);
  unrecorded_.swap(unrecorded);
  nearest_found_.swap(nearest);
  walk_rows(added, control);
}

namespace {

// Inserts row into node's list (graph's lists sorted by (λ, distance)) with
// the λ stage 2 would give it among the list, unless that is past
// lambda_limit; a full list drops its last entry that is not pinned, whose
// row goes to *dropped (else kInvalidId). Returns whether it inserted.
bool insert_repair_edge(MatrixView data, GraphSpan graph, DistanceFn distance, uint32_t node, uint32_t row,
                        int lambda_limit, const std::vector<uint32_t>& pinned,
                        const BeforeListChange& before_change, uint32_t* dropped) {
  *dropped = kInvalidId;
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
    *dropped = list[drop];
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
// later insertions keep; it gains the new ones. dropped gains the rows
// whose edge a full list dropped for a new one. Returns the nodes whose
// lists changed, ascending.
template <typename NearestOf>
std::vector<uint32_t> insert_repair_edges(MatrixView data, GraphSpan graph, DistanceFn distance,
                                          const std::vector<uint32_t>& rows, NearestOf nearest_of, int lambda_limit,
                                          std::vector<std::pair<uint32_t, uint32_t>>& edges,
                                          const BeforeListChange& before_change, std::vector<uint32_t>& dropped) {
  std::vector<uint32_t> changed;
  for (uint32_t row : rows) {
    const uint32_t node = nearest_of(row);
    if (node == kInvalidId) continue;
    std::vector<uint32_t> pinned;
    for (const auto& [at, to] : edges) {
      if (at == node) pinned.push_back(to);
    }
    uint32_t displaced = kInvalidId;
    if (!insert_repair_edge(data, graph, distance, node, row, lambda_limit, pinned, before_change, &displaced)) {
      continue;
    }
    if (displaced != kInvalidId) dropped.push_back(displaced);
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
                                              const RunControl& control, const BeforeListChange& before_change,
                                              const std::vector<uint32_t>& also_rows) {
  const GraphView view{graph.neighbors, graph.lambdas, graph.nodes, graph.degree};
  const std::vector<uint32_t> entries = index.entry_points(params, control);
  const std::shared_ptr<NavigatingLayer> layer = index.navigating_layer();
  check_walk_arguments(data, view, entries.data(), static_cast<int>(entries.size()), first, end, params.ef);
  const std::vector<uint32_t> also = sorted_rows(also_rows, data.rows);
  const int narrow_ef = std::min(params.ef, kRepairNarrowEf);
  changed.clear();
  if (index.device_rows() == nullptr) {
    // the CPU index's check is the walk UnreachedCheck records: the repair
    // then walks again only the walks it can change
    RepairChecks checks(data, view, metric, entries.data(), static_cast<int>(entries.size()),
                        sorted_union(row_range(first, end), also), params.ef, params.lambda_limit,
                        2 * kMaxRecordedExpansions, layer);
    checks.run(control);
    found = static_cast<int64_t>(checks.wide->unreached().size());
    changed = checks.repair(graph, control, before_change);
    if (changed.empty()) return checks.wide->unreached();
    // The index picks its entry points again on the repaired lists, as one
    // loaded from them would: the rows must be reached from those too,
    // unless its searches start from the layer, which the lists do not move.
    index.lists_changed(changed);
    if (layer != nullptr || index.entry_points(params, control) == entries) return checks.wide->unreached();
    SearchParams as_walked = params;
    as_walked.gpu_kernel = kGpuKernelWalkingAsTheCpu;
    return sorted_union(checks.wide->unreached(),
                        sorted_union(index.unreached_rows(first, end, params, control),
                                     kernel_misses(index, data, also, as_walked, control)));
  }
  // The rows the large-batch kernel misses at ef and at the narrow ef (of
  // also_rows, the CPU's walk), each given its edge from where the CPU's
  // walk ends at the narrower ef of the two at which it is missed.
  const DistanceFn distance = metric_distance_fn(metric);
  SearchParams walk_as_cpu = params;
  walk_as_cpu.gpu_kernel = kGpuKernelWalkingAsTheCpu;
  std::vector<uint32_t> missed = sorted_union(index.unreached_rows(first, end, walk_as_cpu, control),
                                              kernel_misses(index, data, also, walk_as_cpu, control));
  found = static_cast<int64_t>(missed.size());
  std::vector<uint32_t> narrow;
  if (narrow_ef < params.ef) {
    walk_as_cpu.ef = narrow_ef;
    narrow = sorted_union(index.unreached_rows(first, end, walk_as_cpu, control),
                          kernel_misses(index, data, also, walk_as_cpu, control));
    missed = sorted_union(missed, narrow);
  }
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
        data, view, distance, entries, layer.get(), static_cast<int64_t>(rows.size()), ef, params.lambda_limit,
        control,
        [&](int64_t i) { return rows[i]; }, [](int64_t) { return static_cast<std::vector<uint32_t>*>(nullptr); },
        [&](int64_t i, int, uint32_t node) { nearest[at[i]] = node; }, /*stop_at_row=*/false);
  }
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  std::vector<uint32_t> displaced;
  changed = insert_repair_edges(
      data, graph, distance, missed,
      [&](uint32_t row) { return nearest[std::lower_bound(missed.begin(), missed.end(), row) - missed.begin()]; },
      params.lambda_limit, edges, before_change, displaced);
  if (!changed.empty()) index.lists_changed(changed);
  // past [first, end): also_rows and those whose edge a repair edge displaced
  displaced.erase(std::remove_if(displaced.begin(), displaced.end(),
                                 [&](uint32_t row) { return row >= first && row < end; }),
                  displaced.end());
  const std::vector<uint32_t> outside = sorted_union(also, sorted_rows(displaced, data.rows));
  return sorted_union(index.unreached_rows(first, end, params, control),
                      kernel_misses(index, data, outside, params, control));
}

namespace {

// The rows of one pass of a build's check that the walks miss, ascending,
// and beside each the nearest other node its walk found (kInvalidId where
// it found none).
struct NarrowWalkMisses {
  std::vector<uint32_t> rows;
  std::vector<uint32_t> nearest;
};

NarrowWalkMisses narrow_walk_misses(SearchIndex& index, MatrixView data, const std::vector<uint32_t>& checked,
                                    const RunControl& control) {
  SearchParams params;
  params.k = 1;
  params.ef = kBuildCheckEf;
  params.gpu_kernel = kGpuKernelWalkingAsTheCpu;
  NarrowWalkMisses misses;
  // The device's check of a range stops each walk at its row, so its
  // misses are walked again for the nearest node each ends at; the CPU's
  // batched searches (their navigating set scored by a matrix product)
  // give it with the misses.
  if (static_cast<int64_t>(checked.size()) == data.rows && index.device_rows() != nullptr) {
    misses.rows = index.unreached_rows(0, data.rows, params, control);
    Matrix rows(static_cast<int64_t>(misses.rows.size()), data.dim);
    for (size_t i = 0; i < misses.rows.size(); ++i) {
      std::copy(data.row(misses.rows[i]), data.row(misses.rows[i]) + data.dim, rows.row(static_cast<int64_t>(i)));
    }
    misses.nearest.resize(misses.rows.size());
    std::vector<float> dists(misses.rows.size());
    index.search(rows.view(), params, misses.nearest.data(), dists.data(), control);
  } else {
    misses.rows = kernel_misses(index, data, checked, params, control, &misses.nearest);
  }
  return misses;
}

// Of the rows (ascending by distance from node, each beside its distance)
// whose walks all end at node, those node links: each unless a row linked
// before it is nearer to it than node is. The walks of the rows left out
// end near a row node links, so that it routes them the way TSDG's first
// stage and the relative neighborhood rule of NSG (Fu et al., 2019) route
// a list's pruned neighbors; a node at which a dense region's walks end
// would otherwise spend its list on the first rows in row order, and drop
// its own edges for them.
void keep_rows_not_occluded(MatrixView data, DistanceFn distance, std::vector<std::pair<float, uint32_t>>& rows) {
  size_t kept = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto [d, row] = rows[i];
    bool occluded = false;
    for (size_t j = 0; j < kept && !occluded; ++j) {
      occluded = distance(data.row(rows[j].second), data.row(row), data.dim) < d;
    }
    if (!occluded) rows[kept++] = rows[i];
  }
  rows.resize(kept);
}

// An edge into each missed row from the nearest node its walk found, of
// the rows keep_rows_not_occluded leaves each node. Nodes are linked in
// parallel, as each insertion writes only its node's list. Returns the
// nodes whose lists changed, ascending; linked_rows gains the rows linked,
// dropped_rows those whose edge a full list dropped for a new one.
std::vector<uint32_t> link_missed_rows(MatrixView data, DistanceFn distance, GraphSpan graph,
                                       const NarrowWalkMisses& misses, const RunControl& control,
                                       const BeforeListChange& before_change, std::vector<uint32_t>& linked_rows,
                                       std::vector<uint32_t>& dropped_rows) {
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  for (size_t i = 0; i < misses.rows.size(); ++i) {
    const uint32_t node = misses.nearest[i];
    if (node != kInvalidId && node != misses.rows[i]) edges.emplace_back(node, misses.rows[i]);
  }
  std::sort(edges.begin(), edges.end());
  std::vector<size_t> node_starts;
  for (size_t i = 0; i < edges.size(); ++i) {
    if (i == 0 || edges[i].first != edges[i - 1].first) node_starts.push_back(i);
  }
  node_starts.push_back(edges.size());
  const int64_t nodes = static_cast<int64_t>(node_starts.size()) - 1;
  std::vector<std::vector<uint32_t>> linked(nodes);
  std::vector<std::vector<uint32_t>> dropped(nodes);
  parallel_for(control, nodes, 64, [&](int64_t begin, int64_t end, int) {
    std::vector<std::pair<float, uint32_t>> rows;
    for (int64_t g = begin; g < end; ++g) {
      const uint32_t node = edges[node_starts[g]].first;
      rows.clear();
      for (size_t e = node_starts[g]; e < node_starts[g + 1]; ++e) {
        rows.emplace_back(distance(data.row(node), data.row(edges[e].second), data.dim), edges[e].second);
      }
      std::sort(rows.begin(), rows.end());
      keep_rows_not_occluded(data, distance, rows);
      for (const auto& [d, row] : rows) {
        uint32_t displaced = kInvalidId;
        if (insert_repair_edge(data, graph, distance, node, row, SearchParams{}.lambda_limit, linked[g],
                               before_change, &displaced)) {
          linked[g].push_back(row);
          if (displaced != kInvalidId) dropped[g].push_back(displaced);
        }
      }
    }
  });
  std::vector<uint32_t> changed;
  for (int64_t g = 0; g < nodes; ++g) {
    if (linked[g].empty()) continue;
    changed.push_back(edges[node_starts[g]].first);
    linked_rows.insert(linked_rows.end(), linked[g].begin(), linked[g].end());
    dropped_rows.insert(dropped_rows.end(), dropped[g].begin(), dropped[g].end());
  }
  return changed;
}

}  // namespace

int64_t link_rows_missed_by_narrow_walks(Backend& backend, MatrixView data, Metric metric, GraphSpan graph,
                                         const RunControl& control, int64_t max_rows,
                                         const BeforeListChange& before_change,
                                         std::unique_ptr<DeviceRows> rows, const std::vector<uint32_t>* only_rows,
                                         GraphView layer) {
  if (data.rows != graph.nodes) {
    throw Error(Status::InvalidArgument, "build check: row count and node count differ");
  }
  if (max_rows < 1) throw Error(Status::InvalidArgument, "build check: max_rows must be positive");
  // Under inner product a row need not be the first answer to its own
  // vector (a row of larger norm in its direction outranks it), so a missed
  // row marks no weak route there.
  if (graph.nodes == 0 || metric == Metric::InnerProduct) return 0;
  const std::vector<uint32_t> given = only_rows != nullptr ? sorted_rows(*only_rows, data.rows) : std::vector<uint32_t>();
  const int64_t count = only_rows != nullptr ? static_cast<int64_t>(given.size()) : data.rows;
  if (count == 0) return 0;
  const int64_t stride = (count + max_rows - 1) / max_rows;
  std::vector<uint32_t> checked;
  for (int64_t i = 0; i < count; i += stride) {
    checked.push_back(only_rows != nullptr ? given[i] : static_cast<uint32_t>(i));
  }
  const DistanceFn distance = metric_distance_fn(metric);
  std::vector<uint32_t> linked_rows;
  try {
    PhaseTrace trace("build check");
    const std::unique_ptr<SearchIndex> index =
        backend.make_search_index_over(data, GraphView::of(graph), metric, std::move(rows));
    if (layer.nodes > 0) index->set_layer(layer);
    trace.mark("search index");
    for (int pass = 0; pass < kBuildCheckPasses; ++pass) {
      const NarrowWalkMisses misses = narrow_walk_misses(*index, data, checked, control);
      trace.mark("walks", static_cast<long long>(checked.size()));
      std::vector<uint32_t> dropped;
      const std::vector<uint32_t> changed =
          link_missed_rows(data, distance, graph, misses, control, before_change, linked_rows, dropped);
      trace.mark("links", static_cast<long long>(misses.rows.size()));
      if (changed.empty() || pass + 1 == kBuildCheckPasses) break;
      index->lists_changed(changed);
      trace.mark("lists changed", static_cast<long long>(changed.size()));
      // The next pass walks the rows this one missed and those that lost
      // an edge. The new edges also turn some walks that reached their rows
      // away (on data of many small clusters nearly as many as they
      // repair), which only a walk of every row would find; but edges to
      // single rows do not make a region reachable for the queries near
      // them either, so passes over every row would cost more than they
      // give.
      checked = sorted_union(misses.rows, sorted_rows(std::move(dropped), data.rows));
    }
  } catch (const Error& e) {
    // A device that other work has left without room for a search index
    // keeps the graph as diversified, or as far as the check linked it: a
    // graph without the check's edges is still a whole index, which a
    // failed build would not be.
    if (e.status() != Status::OutOfMemory) throw;
  }
  std::sort(linked_rows.begin(), linked_rows.end());
  return std::unique(linked_rows.begin(), linked_rows.end()) - linked_rows.begin();
}

void UnreachedCheck::lists_changed(const std::vector<uint32_t>& nodes, const RunControl& control) {
  if (nodes.empty()) return;
  std::vector<uint8_t> is_changed(data_.rows, 0);
  for (uint32_t node : nodes) is_changed[node] = 1;
  std::vector<uint32_t> again(unreached_);
  for (size_t i = 0; i < rows_.size(); ++i) {
    const std::vector<uint32_t>& walk = expanded_[i];
    if (unrecorded_[i] != 0 ||
        std::any_of(walk.begin(), walk.end(), [&](uint32_t node) { return is_changed[node] != 0; })) {
      again.push_back(rows_[i]);
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
    std::vector<uint32_t> displaced;
    const std::vector<uint32_t> changed_now = insert_repair_edges(
        data_, graph, distance_, unreached_, [&](uint32_t row) { return nearest_found_[slot(row)]; },
        lambda_limit_, edges, before_change, displaced);
    if (changed_now.empty()) break;
    lists_changed(changed_now, control);
    check_too(displaced, control);
    changed = sorted_union(changed, changed_now);
  }
  return changed;
}

RepairChecks::RepairChecks(MatrixView data, GraphView graph, Metric metric, const uint32_t* entries,
                           int entry_count, const std::vector<uint32_t>& rows, int ef, int lambda_limit,
                           int64_t record_budget, const std::shared_ptr<NavigatingLayer>& layer) {
  const bool with_narrow = ef > kRepairNarrowEf;
  const int64_t budget = std::min(kMaxRecordedExpansions, record_budget / (with_narrow ? 2 : 1));
  wide = std::make_unique<UnreachedCheck>(data, graph, metric, entries, entry_count, rows, ef, lambda_limit, budget,
                                          layer);
  if (with_narrow) {
    narrow = std::make_unique<UnreachedCheck>(data, graph, metric, entries, entry_count, rows, kRepairNarrowEf,
                                              lambda_limit, budget, layer);
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
    wide->check_too(narrow->rows(), control);
  }
  return sorted_union(changed, wide->repair(graph, kUnreachedRepairRounds, control, before_change));
}

}  // namespace tsdg
