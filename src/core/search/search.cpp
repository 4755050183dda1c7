#include "search.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <memory>

#include "distance.h"
#include "dot_tiles.h"
#include "entry_points.h"
#include "search_internal.h"
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

void GraphSearch::IdSet::reserve(size_t more) {
  size_t capacity = std::max<size_t>(1024, slots_.size());
  while ((used_ + more) * 2 > capacity) capacity *= 2;
  if (capacity > slots_.size()) rehash(capacity);
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

void GraphSearch::offer_many(const uint32_t* ids, const float* dists, int64_t count) {
  seen_.reserve(static_cast<size_t>(count));
  spilled_.reserve(spilled_.size() + static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) offer(ids[i], dists[i]);
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

size_t GraphSearch::memory_bytes() const {
  return pool_.memory_bytes() + seen_.memory_bytes() +
         spilled_.capacity() * sizeof(CandidatePool::Entry);
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

using detail::prefetch_row;
using detail::VisitedTable;

namespace {

// Queries whose distances to the navigating set are computed together: each
// entry row is read once for the whole block, so a navigating set larger
// than the caches costs one pass over memory per block, not per query. A
// multiple of dot_tiles' rows.
constexpr int kEntryBlock = 2 * kTileRows;

}  // namespace

struct CpuSearchIndex::Scratch {
  Scratch(int64_t nodes, int degree, int dim)
      : visited(nodes), fresh(degree), queries(static_cast<size_t>(kEntryBlock + 1) * dim, 0.0f) {}
  VisitedTable visited;
  CandidatePool pool;
  std::vector<uint32_t> fresh;
  std::vector<float> queries;      // the block's queries normalized, for cosine; then one zero row
  std::vector<float> entry_dists;  // the block's distances to the entries, a query's after another
  std::vector<float> entry_dots;   // the block's dot products with the packed entries
  std::vector<CandidatePool::Entry> kept_entries;
  std::vector<uint32_t> layer_ids;  // the layer's entries for a block of queries
  std::vector<float> layer_dists;
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
  size_t bytes = sizeof(*this) + navigating_.entries().size() * sizeof(uint32_t) +
                 (entry_rows_.values.size() + entry_panels_.size() + entry_norms_.size()) * sizeof(float) +
                 payload_values_.size() + payload_flags_.size();
  for (const auto& scratch : free_scratch_) {
    bytes += scratch->visited.bytes() + scratch->fresh.size() * sizeof(uint32_t) +
             (scratch->queries.size() + scratch->entry_dists.size()) * sizeof(float);
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
  if (!navigating_.refresh(data_, graph_, params, control)) return;
  const std::vector<uint32_t>& entries = navigating_.entries();
  entry_rows_ = Matrix(static_cast<int64_t>(entries.size()), data_.dim);
  for (size_t i = 0; i < entries.size(); ++i) {
    std::copy(data_.row(entries[i]), data_.row(entries[i]) + data_.dim, entry_rows_.row(i));
  }
  if (scores_entries_by_product()) {
    const auto count = static_cast<int64_t>(entries.size());
    entry_panels_.assign(static_cast<size_t>(packed_panels_size(count, data_.dim)), 0.0f);
    pack_panels(entry_rows_.values.data(), nullptr, count, data_.dim, entry_panels_.data());
    entry_norms_.resize(entries.size());
    row_norms_squared(entry_rows_.view(), entry_norms_.data());
  }
}

void CpuSearchIndex::lists_changed(const std::vector<uint32_t>& nodes) {
  if (nodes.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  navigating_.lists_changed();
}

void CpuSearchIndex::score_entries(const float* const* queries, int count, Scratch& scratch) const {
  const auto entry_count = static_cast<int64_t>(navigating_.entries().size());
  float* entry_dists = scratch.entry_dists.data();
  if (!scores_entries_by_product()) {
    for (int64_t i = 0; i < entry_count; ++i) {
      const float* row = entry_rows_.row(i);
      for (int q = 0; q < count; ++q) entry_dists[q * entry_count + i] = distance_(queries[q], row, data_.dim);
    }
    return;
  }
  const int dim = data_.dim;
  const int64_t stride = round_up(entry_count, kPanelWidth);
  scratch.entry_dots.resize(static_cast<size_t>(kEntryBlock * stride));
  // the tiles' rows past count are the zero row
  const float* zero_row = scratch.queries.data() + static_cast<size_t>(kEntryBlock) * dim;
  const float* rows[kEntryBlock];
  const int tile_rows = static_cast<int>(round_up(count, kTileRows));
  for (int q = 0; q < tile_rows; ++q) rows[q] = q < count ? queries[q] : zero_row;
  dot_tiles(rows, tile_rows, entry_panels_.data(), stride / kPanelWidth, dim, scratch.entry_dots.data(), stride);
  for (int q = 0; q < count; ++q) {
    const float* dots = scratch.entry_dots.data() + q * stride;
    float* out = entry_dists + q * entry_count;
    if (metric_ == Metric::InnerProduct) {
      for (int64_t i = 0; i < entry_count; ++i) out[i] = -dots[i];
    } else {
      float norm = 0.0f;
      for (int p = 0; p < dim; ++p) norm += queries[q][p] * queries[q][p];
      for (int64_t i = 0; i < entry_count; ++i) out[i] = std::max(0.0f, norm + entry_norms_[i] - 2.0f * dots[i]);
    }
  }
}

int64_t CpuSearchIndex::search_one(const float* query, const float* entry_dists, const SearchParams& params,
                                   const SlackRule& slack, Scratch& scratch, uint32_t* ids,
                                   float* dists) const {
  const int dim = data_.dim;
  VisitedTable& visited = scratch.visited;
  CandidatePool& pool = scratch.pool;
  visited.next_query();
  pool.reset(std::max(params.ef, params.k));

  const std::vector<uint32_t>& entries = navigating_.entries();
  const auto entry_count = static_cast<int64_t>(entries.size());
  for (int64_t i = 0; i < entry_count; ++i) {
    visited.mark(entries[i]);
    pool.push(entries[i], entry_dists[i]);
  }
  int64_t computed = entry_count;
  if (scores_entries_by_product()) {
    // the entries kept, with their distances as every other node gets them
    std::vector<CandidatePool::Entry>& kept = scratch.kept_entries;
    kept.assign(pool.size(), CandidatePool::Entry{});
    for (int i = 0; i < pool.size(); ++i) kept[i] = pool[i];
    pool.reset(std::max(params.ef, params.k));
    for (const CandidatePool::Entry& entry : kept) pool.push(entry.id, distance_(query, data_.row(entry.id), dim));
    computed += static_cast<int64_t>(kept.size());
  }
  return computed + walk(query, params, slack, scratch, ids, dists);
}

int64_t CpuSearchIndex::search_from(const float* query, const uint32_t* entry_ids, const float* entry_dists,
                                    int count, const SearchParams& params, const SlackRule& slack,
                                    Scratch& scratch, uint32_t* ids, float* dists) const {
  scratch.visited.next_query();
  scratch.pool.reset(std::max(params.ef, params.k));
  for (int i = 0; i < count && entry_ids[i] != kInvalidId; ++i) {
    scratch.visited.mark(entry_ids[i]);
    scratch.pool.push(entry_ids[i], entry_dists[i]);
  }
  return walk(query, params, slack, scratch, ids, dists);
}

int64_t CpuSearchIndex::walk(const float* query, const SearchParams& params, const SlackRule& slack,
                             Scratch& scratch, uint32_t* ids, float* dists) const {
  const int dim = data_.dim;
  const int degree = graph_.degree;
  const int lambda_limit = params.lambda_limit;
  VisitedTable& visited = scratch.visited;
  CandidatePool& pool = scratch.pool;
  uint32_t* fresh = scratch.fresh.data();
  int64_t computed = 0;
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
  search_counted(queries, params, ids, dists, control);
}

int64_t CpuSearchIndex::search_counted(MatrixView queries, const SearchParams& params, uint32_t* ids,
                                       float* dists, const RunControl& control) {
  validate_search_params(params);
  if (queries.rows == 0) return 0;
  if (queries.dim != data_.dim) {
    throw Error(Status::InvalidArgument, "search: query dimension " + std::to_string(queries.dim) +
                                             " does not match the index dimension " +
                                             std::to_string(data_.dim));
  }
  const int k = params.k;
  if (graph_.nodes == 0) {
    std::fill(ids, ids + queries.rows * k, kInvalidId);
    std::fill(dists, dists + queries.rows * k, std::numeric_limits<float>::infinity());
    return 0;
  }
  const SlackRule slack = slack_rule_for(metric_, params.slack, k, nn1_bound_);
  if (std::shared_ptr<NavigatingLayer> layer = current_layer()) {
    return search_through_layer(*layer, queries, params, slack, ids, dists, control);
  }
  std::atomic<int64_t> call_computed{0};
  prepare_entry_points(params);
  const int workers = worker_count(control);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(64, queries.rows / (4 * workers)));
  control.set_total(queries.rows);
  parallel_for(control, queries.rows, chunk, [&](int64_t begin, int64_t end, int) {
    std::unique_ptr<Scratch> scratch = acquire_scratch();
    const auto entry_count = static_cast<int64_t>(navigating_.entries().size());
    scratch->entry_dists.resize(static_cast<size_t>(kEntryBlock * entry_count));
    int64_t computed = 0;
    for (int64_t first = begin; first < end; first += kEntryBlock) {
      const int count = static_cast<int>(std::min<int64_t>(kEntryBlock, end - first));
      const float* block[kEntryBlock];
      for (int b = 0; b < count; ++b) {
        block[b] = queries.row(first + b);
        if (metric_ == Metric::Cosine) {
          float* normalized = scratch->queries.data() + static_cast<size_t>(b) * queries.dim;
          std::copy(block[b], block[b] + queries.dim, normalized);
          normalize_rows(normalized, 1, queries.dim);
          block[b] = normalized;
        }
      }
      score_entries(block, count, *scratch);
      for (int b = 0; b < count; ++b) {
        const int64_t q = first + b;
        computed += search_one(block[b], scratch->entry_dists.data() + b * entry_count, params, slack, *scratch,
                               ids + q * k, dists + q * k);
      }
    }
    distance_computations_.fetch_add(computed, std::memory_order_relaxed);
    call_computed.fetch_add(computed, std::memory_order_relaxed);
    control.add_done(end - begin);
    release_scratch(std::move(scratch));
  });
  return call_computed.load();
}

int64_t CpuSearchIndex::distance_computations() const {
  const std::shared_ptr<NavigatingLayer> layer = current_layer();
  return distance_computations_.load() + (layer ? layer->distance_computations() : 0);
}

std::shared_ptr<NavigatingLayer> CpuSearchIndex::current_layer() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return layer_;
}

void CpuSearchIndex::set_layer(GraphView layer) {
  if (layer.nodes != 0 && layer.nodes != layer_node_count(graph_.nodes)) {
    throw Error(Status::InvalidArgument, "search index: the layer's node count does not match the graph's");
  }
  std::shared_ptr<NavigatingLayer> made;
  if (layer.nodes > 0) made = std::make_shared<NavigatingLayer>(gather_layer_rows(data_).view(), layer, metric_);
  std::lock_guard<std::mutex> lock(mutex_);
  layer_ = std::move(made);
}

int64_t CpuSearchIndex::search_through_layer(NavigatingLayer& layer, MatrixView queries, const SearchParams& params,
                                             const SlackRule& slack, uint32_t* ids, float* dists,
                                             const RunControl& control) {
  const int k = params.k;
  const int width = NavigatingLayer::width(params.ef);
  std::atomic<int64_t> call_computed{0};
  const int workers = worker_count(control);
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(64, queries.rows / (4 * workers)));
  control.set_total(queries.rows);
  parallel_for(control, queries.rows, chunk, [&](int64_t begin, int64_t end, int) {
    std::unique_ptr<Scratch> scratch = acquire_scratch();
    // the layer's walks of this chunk's queries, on this thread
    RunControl inline_control;
    inline_control.cancel = control.cancel;
    std::vector<uint32_t>& entry_ids = scratch->layer_ids;
    std::vector<float>& entry_dists = scratch->layer_dists;
    int64_t computed = 0;
    int64_t layer_computed = 0;  // the layer's distance_computations() counts them already
    for (int64_t first = begin; first < end; first += kEntryBlock) {
      const int64_t count = std::min<int64_t>(kEntryBlock, end - first);
      entry_ids.resize(static_cast<size_t>(count) * width);
      entry_dists.resize(entry_ids.size());
      layer_computed += layer.entries(queries.slice(first, count), params.ef, entry_ids.data(),
                                      entry_dists.data(), inline_control);
      for (int64_t b = 0; b < count; ++b) {
        const int64_t q = first + b;
        const float* query = queries.row(q);
        if (metric_ == Metric::Cosine) {
          float* normalized = scratch->queries.data();
          std::copy(query, query + queries.dim, normalized);
          normalize_rows(normalized, 1, queries.dim);
          query = normalized;
        }
        computed += search_from(query, entry_ids.data() + b * width, entry_dists.data() + b * width, width,
                                params, slack, *scratch, ids + q * k, dists + q * k);
      }
    }
    distance_computations_.fetch_add(computed, std::memory_order_relaxed);
    call_computed.fetch_add(computed + layer_computed, std::memory_order_relaxed);
    control.add_done(end - begin);
    release_scratch(std::move(scratch));
  });
  return call_computed.load();
}

std::vector<uint32_t> CpuSearchIndex::unreached_rows(int64_t first, int64_t end,
                                                     const SearchParams& params,
                                                     const RunControl& control) {
  validate_search_params(params);
  prepare_entry_points(params, control);
  const std::shared_ptr<NavigatingLayer> layer = current_layer();
  return tsdg::unreached_rows(data_, graph_, metric_, navigating_.entries().data(),
                              static_cast<int>(navigating_.entries().size()), first, end, params.ef,
                              params.lambda_limit, control, layer.get());
}

std::vector<uint32_t> CpuSearchIndex::entry_points(const SearchParams& params,
                                                   const RunControl& control) {
  prepare_entry_points(params, control);
  std::lock_guard<std::mutex> lock(mutex_);
  return navigating_.entries();
}

}  // namespace tsdg
