#include "ggm.h"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "descent.h"
#include "distance.h"
#include "huge_pages.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// One side of the merge: its rows are [begin, end) of the data, its graph
// uses ids local to the side.
struct Side {
  KnnView graph;
  int64_t begin, end;
};

void check_merge_arguments(MatrixView data, int64_t split, KnnView first, KnnView second) {
  if (split < 0 || split > data.rows) {
    throw Error(Status::InvalidArgument, "merge split " + std::to_string(split) +
                                             " outside [0, " + std::to_string(data.rows) + "]");
  }
  if (first.nodes != split || second.nodes != data.rows - split) {
    throw Error(Status::InvalidArgument,
                "merge graphs have " + std::to_string(first.nodes) + " and " +
                    std::to_string(second.nodes) + " lists for sides of " + std::to_string(split) +
                    " and " + std::to_string(data.rows - split) + " rows");
  }
  if ((first.nodes > 0 && first.k <= 0) || (second.nodes > 0 && second.k <= 0)) {
    throw Error(Status::InvalidArgument, "merge graphs need k > 0");
  }
}

// Where each row sits in the copy the refinement runs on: region order
// within each side, so that positions [0, split) are still the first side.
struct Placement {
  std::vector<uint32_t> row_at;       // position -> row
  std::vector<uint32_t> position_of;  // row -> position
};

Placement place_rows(MatrixView data, int64_t split, uint64_t seed, const RunControl& control) {
  Placement placement;
  placement.row_at = region_order(data.slice(0, split), seed, control);
  const std::vector<uint32_t> second = region_order(data.slice(split, data.rows - split), seed, control);
  for (uint32_t r : second) placement.row_at.push_back(static_cast<uint32_t>(split + r));
  placement.position_of.resize(data.rows);
  for (int64_t i = 0; i < data.rows; ++i) placement.position_of[placement.row_at[i]] = static_cast<uint32_t>(i);
  return placement;
}

// The rows in placement order: row placement.row_at[i] at position i.
HugePageArray<float> placed_rows(MatrixView data, const Placement& placement, const RunControl& control) {
  HugePageArray<float> values(static_cast<size_t>(data.rows) * data.dim, HugePageArray<float>::Unfilled{});
  parallel_for(control, data.rows, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const float* row = data.row(placement.row_at[i]);
      std::copy(row, row + data.dim, values.data() + i * data.dim);
    }
  });
  return values;
}

// The start of the merged list of position s (row `row`) from its own side's
// graph (Algorithm 3, lines 1-4): its first k - k/2 neighbors, as OLD
// positions; the next held_k are held back in held, as rows. Returns how many
// entries it wrote.
int start_own_entries(int64_t s, int64_t row, const Side& own, const Placement& placement,
                      DescentLists& lists, int held_k, uint32_t* held_ids, float* held_dists) {
  const int k = lists.k();
  const KnnView& graph = own.graph;
  const int64_t local = row - own.begin;
  const uint32_t* ids = graph.list(local);
  const float* dists = graph.list_dists(local);
  DescentLists::Entry* entries = lists.list(s);
  uint8_t* flags = lists.flags(s);

  const int keep = std::min(graph.k, k - k / 2);
  int count = 0;
  for (int j = 0; j < keep; ++j) {
    if (ids[j] == kInvalidId) continue;
    entries[count] = {dists[j], placement.position_of[own.begin + ids[j]]};
    flags[count++] = 0;
  }
  for (int j = keep; j < keep + held_k; ++j) {
    const bool valid = j < graph.k && ids[j] != kInvalidId;
    held_ids[j - keep] = valid ? static_cast<uint32_t>(own.begin + ids[j]) : kInvalidId;
    held_dists[j - keep] = valid ? dists[j] : std::numeric_limits<float>::infinity();
  }
  return count;
}

// The merged list of position s (row `row`) before refinement (Algorithm 3,
// lines 1-9): the first k - k/2 neighbors of its own graph, kept as OLD, and
// k/2 random rows of the other side, marked NEW; lists hold positions. The
// rest of its own list is held back in held, as rows.
void init_merged_list(MatrixView local_data, Metric metric, uint64_t seed, int64_t s, int64_t row,
                      const Side& own, const Side& other, const Placement& placement,
                      DescentLists& lists, int held_k, uint32_t* held_ids, float* held_dists) {
  const int k = lists.k();
  DescentLists::Entry* entries = lists.list(s);
  uint8_t* flags = lists.flags(s);
  int count = start_own_entries(s, row, own, placement, lists, held_k, held_ids, held_dists);

  const int64_t other_rows = other.end - other.begin;
  const int random = static_cast<int>(std::min<int64_t>(k - count, other_rows));
  std::vector<uint32_t> drawn(random);
  uint64_t state = seed ^ (static_cast<uint64_t>(s) * 0xd1b54a32d192ed03ULL);
  draw_distinct(state, static_cast<uint64_t>(other_rows), random, drawn.data());
  for (int j = 0; j < random; ++j) drawn[j] += static_cast<uint32_t>(other.begin);  // positions of the other side
  prefetch_rows(local_data, drawn.data(), random);
  for (int j = 0; j < random; ++j) {
    const uint32_t v = drawn[j];
    entries[count] = {metric_distance(metric, local_data.row(s), local_data.row(v), local_data.dim), v};
    flags[count++] = DescentLists::kNew;
  }
  lists.sort_list(s);
}

// Algorithm 3, line 12: the refined list (positions) merged with the
// held-back entries (rows), sorted, duplicates dropped, cut to k.
void merge_held(const DescentLists::Entry* refined, int k, const uint32_t* row_at,
                const uint32_t* held_ids, const float* held_dists, int held_k, uint32_t* out_ids,
                float* out_dists) {
  std::vector<std::pair<float, uint32_t>> all;
  all.reserve(k + held_k);
  for (int j = 0; j < k; ++j) {
    if (refined[j].id != kInvalidId) all.emplace_back(refined[j].dist, row_at[refined[j].id]);
  }
  for (int j = 0; j < held_k; ++j) {
    if (held_ids[j] != kInvalidId) all.emplace_back(held_dists[j], held_ids[j]);
  }
  std::sort(all.begin(), all.end());
  int out = 0;
  for (size_t i = 0; i < all.size() && out < k; ++i) {
    if (std::find(out_ids, out_ids + out, all[i].second) != out_ids + out) continue;
    out_ids[out] = all[i].second;
    out_dists[out++] = all[i].first;
  }
  std::fill(out_ids + out, out_ids + k, kInvalidId);
  std::fill(out_dists + out, out_dists + k, std::numeric_limits<float>::infinity());
}

// An old row's list as the incremental merge starts it at position s: its
// whole old list (as positions), every entry OLD (it was final among the old
// rows). Without stored distances they are computed on the local rows, where
// a list's rows mostly share the row's region.
void init_old_list(MatrixView local_data, DistanceFn distance, KnnView old_graph,
                   int64_t row, int64_t s, const Placement& placement, DescentLists& lists) {
  const int count = std::min(old_graph.k, lists.k());
  const bool known = old_graph.dists != nullptr;
  DescentLists::Entry* entries = lists.list(s);
  uint8_t* flags = lists.flags(s);
  for (int j = 0; j < count; ++j) {
    const uint32_t id = old_graph.list(row)[j];
    if (id == kInvalidId) {
      entries[j] = {std::numeric_limits<float>::infinity(), kInvalidId};
    } else {
      const uint32_t position = placement.position_of[id];
      entries[j] = {known ? old_graph.list_dists(row)[j]
                          : distance(local_data.row(s), local_data.row(position), local_data.dim),
                    position};
    }
    flags[j] = 0;
  }
  lists.sort_list(s);
}

// For every batch row, the old row its list starts from: the nearest of the
// seed pivots.
std::vector<uint32_t> nearest_old_pivots(MatrixView data, int64_t split, Metric metric, uint64_t seed,
                                         const RunControl& control) {
  const std::vector<uint32_t> pivot_rows = merge_seed_pivots(split, seed);
  std::vector<uint32_t> nearest =
      nearest_sampled_row(data, pivot_rows, data.slice(split, data.rows - split), metric, control);
  for (uint32_t& p : nearest) p = pivot_rows[p];
  return nearest;
}

// A batch row's list as the incremental merge starts it at position s: the
// first k - k/2 neighbors of its batch graph (OLD, as in Algorithm 3), then,
// instead of k/2 random old rows, the k/2 nearest old rows met by a greedy
// walk on the old k-NN graph from its pivot towards the row (NEW): the joins
// then refine lists that start near their final ones, in fewer iterations
// than from random rows. Random old rows fill what the walk lacks.
void init_batch_list(MatrixView local_data, DistanceFn distance, uint64_t seed, int64_t s, int64_t row,
                     const Side& batch_side, KnnView old_graph, uint32_t pivot,
                     const Placement& placement, DescentLists& lists, int held_k, uint32_t* held_ids,
                     float* held_dists, std::vector<DescentLists::Entry>& met) {
  const int k = lists.k();
  DescentLists::Entry* entries = lists.list(s);
  uint8_t* flags = lists.flags(s);
  int count = start_own_entries(s, row, batch_side, placement, lists, held_k, held_ids, held_dists);

  // The walk keeps every old row it measured (as positions).
  met.clear();
  const auto measure = [&](uint32_t old_row) {
    const uint32_t v = placement.position_of[old_row];
    const float d = distance(local_data.row(s), local_data.row(v), local_data.dim);
    met.push_back({d, v});
    return d;
  };
  uint32_t at = pivot;
  float at_dist = measure(pivot);
  for (int step = 0; step < kMergeSeedWalkSteps; ++step) {
    const uint32_t* list = old_graph.list(at);
    uint32_t next = at;
    float next_dist = at_dist;
    for (int j = 0; j < old_graph.k; ++j) {
      if (list[j] == kInvalidId) continue;
      const float d = measure(list[j]);
      if (d < next_dist) {
        next = list[j];
        next_dist = d;
      }
    }
    if (next == at) break;
    at = next;
    at_dist = next_dist;
  }
  std::sort(met.begin(), met.end(), [](const DescentLists::Entry& a, const DescentLists::Entry& b) {
    return a.dist < b.dist || (a.dist == b.dist && a.id < b.id);
  });
  const int first_old = count;
  const auto add_old = [&](const DescentLists::Entry& e) {
    for (int j = first_old; j < count; ++j) {
      if (entries[j].id == e.id) return;
    }
    entries[count] = e;
    flags[count++] = DescentLists::kNew;
  };
  for (size_t i = 0; i < met.size() && count < k; ++i) add_old(met[i]);
  const int64_t split = batch_side.begin;
  uint64_t state = seed ^ (static_cast<uint64_t>(s) * 0xd1b54a32d192ed03ULL);
  for (int tries = 0; count < k && count - first_old < split && tries < 4 * k; ++tries) {
    uint32_t drawn;
    draw_distinct(state, static_cast<uint64_t>(split), 1, &drawn);
    const uint32_t v = placement.position_of[drawn];
    add_old({distance(local_data.row(s), local_data.row(v), local_data.dim), v});
  }
  lists.sort_list(s);
}

}  // namespace

KnnGraph ggm_merge(MatrixView data, int64_t split, const KnnGraph& first, const KnnGraph& second,
                   Metric metric, const GnndParams& params, const RunControl& control) {
  check_gnnd_params(data, params);
  check_merge_arguments(data, split, first, second);
  const int64_t n = data.rows;
  const int k = params.k;
  const Side sides[2] = {{first, 0, split}, {second, split, n}};
  const int keep = k - k / 2;
  const int held_k = std::max(0, std::max(first.k, second.k) - keep);
  std::vector<uint32_t> held_ids(static_cast<size_t>(n) * held_k);
  std::vector<float> held_dists(static_cast<size_t>(n) * held_k);

  control.set_total(n * (params.iterations + 2));
  // As in gnnd_build, the refinement runs on a copy of the rows in region
  // order (within each side), so that a join's rows and lists are near in
  // memory.
  const Placement placement = place_rows(data, split, params.seed, control);
  const HugePageArray<float> local_values = placed_rows(data, placement, control);
  const MatrixView local{local_values.data(), n, data.dim};

  DescentLists lists(n, k, control);
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      const int side = s < split ? 0 : 1;
      init_merged_list(local, metric, params.seed, s, placement.row_at[s], sides[side],
                       sides[1 - side], placement, lists, held_k, held_ids.data() + s * held_k,
                       held_dists.data() + s * held_k);
    }
    control.add_done(end - begin);
  });

  DescentOptions options;
  options.samples = params.samples;
  options.iterations = params.iterations;
  options.min_update_rate = params.min_update_rate;
  options.seed = params.seed;
  options.split = split;
  options.order_joins_by_region = false;
  // With one side empty there is nothing to cross-match.
  if (split == 0 || split == n) options.iterations = 0;
  const int ran = run_descent(local, metric, lists, options, control);
  control.add_done(n * (params.iterations - ran));

  KnnGraph merged(n, k, KnnGraph::Unfilled{});
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t row = placement.row_at[s];
      merge_held(lists.list(s), k, placement.row_at.data(), held_ids.data() + s * held_k,
                 held_dists.data() + s * held_k, held_k, merged.ids.data() + row * k,
                 merged.dists.data() + row * k);
    }
    control.add_done(end - begin);
  });
  return merged;
}

std::vector<uint32_t> merge_seed_pivots(int64_t split, uint64_t seed) {
  const int64_t pivots = std::max<int64_t>(
      {1, std::min(split / kMergeSeedPivotRows, kMergeSeedMaxPivots), split / kMergeSeedSparsestPivotRows});
  std::vector<uint32_t> rows(split > 0 ? pivots : 0);
  uint64_t state = seed ^ 0x70697675747344ULL;
  if (split > 0) draw_distinct(state, static_cast<uint64_t>(split), static_cast<int>(pivots), rows.data());
  return rows;
}

GnndParams incremental_merge_params(const GnndParams& build) {
  GnndParams merge = build;
  merge.min_update_rate = kMergeMinUpdateRate;
  return merge;
}

IncrementalMerge ggm_merge_incremental(MatrixView data, int64_t split, KnnView old_graph,
                                       const KnnGraph& batch_graph, Metric metric,
                                       const GnndParams& params, const RunControl& control) {
  check_gnnd_params(data, params);
  check_merge_arguments(data, split, old_graph, batch_graph);
  const int64_t n = data.rows;
  const int64_t batch = n - split;
  const int k = params.k;
  const Side old_side{old_graph, 0, split};
  const Side batch_side{batch_graph, split, n};
  const int held_k = std::max(0, batch_graph.k - (k - k / 2));
  std::vector<uint32_t> held_ids(static_cast<size_t>(batch) * held_k);
  std::vector<float> held_dists(static_cast<size_t>(batch) * held_k);
  control.set_total(n * (params.iterations + 2));

  // As in ggm_merge, the refinement runs on a copy of the rows in region
  // order within each side: a 5% batch reaches most old lists (10k rows into
  // 190k: 160k joins of old rows in an iteration), whose rows are then read
  // near each other instead of all over the index.
  const Placement placement = place_rows(data, split, params.seed, control);
  const HugePageArray<float> local_values = placed_rows(data, placement, control);
  const MatrixView local{local_values.data(), n, data.dim};

  DescentLists lists(n, k, control);
  const DistanceFn distance = metric_distance_fn(metric);
  const std::vector<uint32_t> pivots =
      split == 0 || batch == 0 ? std::vector<uint32_t>() : nearest_old_pivots(data, split, metric, params.seed, control);
  std::vector<std::vector<DescentLists::Entry>> walk_scratch(worker_count(control));
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int worker) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t row = placement.row_at[s];
      if (row < split) {
        init_old_list(local, distance, old_graph, row, s, placement, lists);
      } else if (split == 0) {
        init_merged_list(local, metric, params.seed, s, row, batch_side, old_side, placement, lists,
                         held_k, held_ids.data() + (row - split) * held_k, held_dists.data() + (row - split) * held_k);
      } else {
        const int64_t b = row - split;
        init_batch_list(local, distance, params.seed, s, row, batch_side, old_graph, pivots[b], placement, lists,
                        held_k, held_ids.data() + b * held_k, held_dists.data() + b * held_k, walk_scratch[worker]);
      }
    }
    control.add_done(end - begin);
  });

  DescentOptions options;
  options.samples = params.samples;
  options.iterations = split == 0 || batch == 0 ? 0 : params.iterations;
  options.min_update_rate = incremental_merge_update_rate(params.min_update_rate, split, batch, k);
  options.seed = params.seed;
  options.split = split;
  options.first_side_old_samples = kMergeOldRowOldSamples;
  options.order_joins_by_region = false;
  IncrementalMerge result;
  result.iterations = run_descent(local, metric, lists, options, control);
  control.add_done(n * (params.iterations - result.iterations));

  result.graph = KnnGraph(n, k, KnnGraph::Unfilled{});
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      const int64_t row = placement.row_at[s];
      uint32_t* out_ids = result.graph.ids.data() + row * k;
      float* out_dists = result.graph.dists.data() + row * k;
      if (row >= split) {
        const int64_t b = row - split;
        merge_held(lists.list(s), k, placement.row_at.data(), held_ids.data() + b * held_k,
                   held_dists.data() + b * held_k, held_k, out_ids, out_dists);
        continue;
      }
      const DescentLists::Entry* entries = lists.list(s);
      for (int j = 0; j < k; ++j) {
        out_ids[j] = entries[j].id == kInvalidId ? kInvalidId : placement.row_at[entries[j].id];
        out_dists[j] = entries[j].dist;
      }
    }
    control.add_done(end - begin);
  });
  result.changed = lists_changed_by_batch(result.graph.ids.data(), n, k, split, control);
  return result;
}

double incremental_merge_update_rate(double rate, int64_t split, int64_t batch, int k) {
  const int64_t n = split + batch;
  if (n <= 0) return 0.0;
  const double can_change = static_cast<double>(batch) + std::min(static_cast<double>(split),
                                                                  static_cast<double>(batch) * k);
  return rate * can_change / static_cast<double>(n);
}

std::vector<uint8_t> lists_changed_by_batch(const uint32_t* merged_ids, int64_t nodes, int k,
                                            int64_t split, const RunControl& control) {
  std::vector<uint8_t> changed(nodes, 0);
  parallel_for(control, nodes, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      if (s >= split) {
        changed[s] = 1;
        continue;
      }
      const uint32_t* ids = merged_ids + s * k;
      for (int j = 0; j < k && !changed[s]; ++j) {
        changed[s] = ids[j] != kInvalidId && ids[j] >= static_cast<uint64_t>(split);
      }
    }
  });
  return changed;
}

}  // namespace tsdg
