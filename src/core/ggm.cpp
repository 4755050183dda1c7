#include "ggm.h"

#include <algorithm>
#include <string>
#include <vector>

#include "descent.h"
#include "distance.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// One side of the merge: its rows are [begin, end) of the data, its graph
// uses ids local to the side.
struct Side {
  const KnnGraph* graph;
  int64_t begin, end;
};

void check_merge_arguments(MatrixView data, int64_t split, const KnnGraph& first,
                           const KnnGraph& second) {
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

// The merged list of s before refinement (Algorithm 3, lines 1-9): the first
// k - k/2 neighbors of its own graph, kept as OLD, and k/2 random rows of the
// other side, marked NEW. The rest of its own list is held back in held.
void init_merged_list(MatrixView data, Metric metric, uint64_t seed, int64_t s, const Side& own,
                      const Side& other, DescentLists& lists, int held_k, uint32_t* held_ids,
                      float* held_dists) {
  const int k = lists.k();
  const KnnGraph& graph = *own.graph;
  const int64_t local = s - own.begin;
  const uint32_t* ids = graph.list(local);
  const float* dists = graph.list_dists(local);
  DescentLists::Entry* entries = lists.list(s);
  uint8_t* flags = lists.flags(s);

  const int keep = std::min(graph.k, k - k / 2);
  int count = 0;
  for (int j = 0; j < keep; ++j) {
    if (ids[j] == kInvalidId) continue;
    entries[count] = {dists[j], static_cast<uint32_t>(own.begin + ids[j])};
    flags[count++] = 0;
  }
  for (int j = keep; j < keep + held_k; ++j) {
    const bool valid = j < graph.k && ids[j] != kInvalidId;
    held_ids[j - keep] = valid ? static_cast<uint32_t>(own.begin + ids[j]) : kInvalidId;
    held_dists[j - keep] = valid ? dists[j] : std::numeric_limits<float>::infinity();
  }

  const int64_t other_rows = other.end - other.begin;
  const int random = static_cast<int>(std::min<int64_t>(k - count, other_rows));
  std::vector<uint32_t> drawn(random);
  uint64_t state = seed ^ (static_cast<uint64_t>(s) * 0xd1b54a32d192ed03ULL);
  draw_distinct(state, static_cast<uint64_t>(other_rows), random, drawn.data());
  for (int j = 0; j < random; ++j) {
    const auto v = static_cast<uint32_t>(other.begin + drawn[j]);
    entries[count] = {metric_distance(metric, data.row(s), data.row(v), data.dim), v};
    flags[count++] = DescentLists::kNew;
  }
  lists.sort_list(s);
}

// Algorithm 3, line 12: the refined list merged with the held-back entries,
// sorted, duplicates dropped, cut to k.
void merge_held(const DescentLists::Entry* refined, int k, const uint32_t* held_ids,
                const float* held_dists, int held_k, uint32_t* out_ids, float* out_dists) {
  std::vector<std::pair<float, uint32_t>> all;
  all.reserve(k + held_k);
  for (int j = 0; j < k; ++j) {
    if (refined[j].id != kInvalidId) all.emplace_back(refined[j].dist, refined[j].id);
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
}

}  // namespace

KnnGraph ggm_merge(MatrixView data, int64_t split, const KnnGraph& first, const KnnGraph& second,
                   Metric metric, const GnndParams& params, const RunControl& control) {
  check_gnnd_params(data, params);
  check_merge_arguments(data, split, first, second);
  const int64_t n = data.rows;
  const int k = params.k;
  const Side sides[2] = {{&first, 0, split}, {&second, split, n}};
  const int keep = k - k / 2;
  const int held_k = std::max(0, std::max(first.k, second.k) - keep);
  std::vector<uint32_t> held_ids(static_cast<size_t>(n) * held_k);
  std::vector<float> held_dists(static_cast<size_t>(n) * held_k);

  control.set_total(n * (params.iterations + 2));
  DescentLists lists(n, k);
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      const int side = s < split ? 0 : 1;
      init_merged_list(data, metric, params.seed, s, sides[side], sides[1 - side], lists, held_k,
                       held_ids.data() + s * held_k, held_dists.data() + s * held_k);
    }
    control.add_done(end - begin);
  });

  DescentOptions options;
  options.samples = params.samples;
  options.iterations = params.iterations;
  options.min_update_rate = params.min_update_rate;
  options.seed = params.seed;
  options.split = split;
  // With one side empty there is nothing to cross-match.
  if (split == 0 || split == n) options.iterations = 0;
  const int ran = run_descent(data, metric, lists, options, control);
  control.add_done(n * (params.iterations - ran));

  KnnGraph merged(n, k);
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      merge_held(lists.list(s), k, held_ids.data() + s * held_k, held_dists.data() + s * held_k,
                 held_k, merged.ids.data() + s * k, merged.dists.data() + s * k);
    }
    control.add_done(end - begin);
  });
  return merged;
}

}  // namespace tsdg
