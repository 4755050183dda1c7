// The out-of-GPU-memory k-NN graph (Wang et al., 2021, section 5): the set is cut in
// shards small enough that two of them fit on the GPU; each shard gets its
// GNND graph, then every pair of shards is merged by GGM. A shard's lists
// hold global ids; for a merge, the entries inside the pair are handed to GGM
// (as ids local to the pair) and those pointing to other shards are set
// aside, then each list keeps the k best of GGM's result and what was set
// aside. Only the rows of the pair in use are on the GPU.
#include <algorithm>
#include <limits>
#include <vector>

#include "gpu_algorithms.h"

namespace tsdg::cuda {
namespace {

struct Shard {
  int64_t first = 0;
  int64_t rows = 0;
  KnnGraph lists;  // global ids
};

bool entry_less(float da, uint32_t ia, float db, uint32_t ib) {
  return da < db || (da == db && ia < ib);
}

// The entries of shard's lists that point into the pair, as pair-local ids
// (the shard's own rows first when it is the pair's first side).
KnnGraph pair_local_lists(const Shard& shard, const Shard& first, const Shard& second) {
  const int k = shard.lists.k;
  KnnGraph local(shard.rows, k);
  for (int64_t u = 0; u < shard.rows; ++u) {
    int out = 0;
    for (int j = 0; j < k; ++j) {
      const uint32_t id = shard.lists.list(u)[j];
      if (id == kInvalidId) break;
      const int64_t global = id;
      int64_t pair_id = -1;
      if (global >= first.first && global < first.first + first.rows) {
        pair_id = global - first.first;
      } else if (global >= second.first && global < second.first + second.rows) {
        pair_id = first.rows + (global - second.first);
      }
      if (pair_id < 0) continue;
      // GGM takes each side's graph with ids local to that side.
      if (&shard == &second) pair_id -= first.rows;
      if (pair_id < 0 || pair_id >= shard.rows) continue;  // points to the other side of the pair
      local.ids[u * k + out] = static_cast<uint32_t>(pair_id);
      local.dists[u * k + out] = shard.lists.list_dists(u)[j];
      ++out;
    }
  }
  return local;
}

// Row u of shard keeps the k best distinct entries of its list and of the
// merged list (pair-local ids mapped back to global ones).
void keep_best(Shard& shard, int64_t u, const KnnGraph& merged, int64_t merged_row,
               const Shard& first, const Shard& second) {
  const int k = shard.lists.k;
  std::vector<std::pair<float, uint32_t>> entries;
  entries.reserve(2 * k);
  for (int j = 0; j < k; ++j) {
    const uint32_t id = shard.lists.list(u)[j];
    if (id != kInvalidId) entries.emplace_back(shard.lists.list_dists(u)[j], id);
  }
  for (int j = 0; j < k; ++j) {
    const uint32_t id = merged.list(merged_row)[j];
    if (id == kInvalidId) continue;
    const int64_t global =
        id < first.rows ? first.first + id : second.first + (static_cast<int64_t>(id) - first.rows);
    entries.emplace_back(merged.list_dists(merged_row)[j], static_cast<uint32_t>(global));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return entry_less(a.first, a.second, b.first, b.second);
  });
  uint32_t* ids = shard.lists.ids.data() + u * k;
  float* dists = shard.lists.dists.data() + u * k;
  int out = 0;
  for (size_t e = 0; e < entries.size() && out < k; ++e) {
    bool repeated = false;
    for (int j = 0; j < out && !repeated; ++j) repeated = ids[j] == entries[e].second;
    if (repeated) continue;
    ids[out] = entries[e].second;
    dists[out] = entries[e].first;
    ++out;
  }
  for (; out < k; ++out) {
    ids[out] = kInvalidId;
    dists[out] = std::numeric_limits<float>::infinity();
  }
}

}  // namespace

KnnGraph gnnd_build_by_shards(DeviceContext& ctx, MatrixView data, Metric metric,
                              const GnndParams& params, int64_t shard_rows,
                              const RunControl& control) {
  const int k = params.k;
  std::vector<Shard> shards;
  for (int64_t first = 0; first < data.rows; first += shard_rows) {
    Shard shard;
    shard.first = first;
    shard.rows = std::min(shard_rows, data.rows - first);
    shards.push_back(std::move(shard));
  }
  // The last shard must not be too small for sampling.
  if (shards.size() > 1 && shards.back().rows <= 4 * static_cast<int64_t>(k)) {
    shards[shards.size() - 2].rows += shards.back().rows;
    shards.pop_back();
  }
  for (Shard& shard : shards) {
    control.throw_if_cancelled();
    shard.lists = gnnd_build(ctx, data.slice(shard.first, shard.rows), metric, params, control);
    for (uint32_t& id : shard.lists.ids) {
      if (id != kInvalidId) id = static_cast<uint32_t>(id + shard.first);
    }
  }
  for (size_t a = 0; a < shards.size(); ++a) {
    for (size_t b = a + 1; b < shards.size(); ++b) {
      control.throw_if_cancelled();
      Shard& first = shards[a];
      Shard& second = shards[b];
      Matrix pair(first.rows + second.rows, data.dim);
      std::copy(data.row(first.first), data.row(first.first + first.rows), pair.row(0));
      std::copy(data.row(second.first), data.row(second.first + second.rows), pair.row(first.rows));
      const KnnGraph first_local = pair_local_lists(first, first, second);
      const KnnGraph second_local = pair_local_lists(second, first, second);
      const KnnGraph merged = ggm_merge(ctx, pair.view(), first.rows, first_local, second_local,
                                        metric, params, control);
      for (int64_t u = 0; u < first.rows; ++u) keep_best(first, u, merged, u, first, second);
      for (int64_t v = 0; v < second.rows; ++v) {
        keep_best(second, v, merged, first.rows + v, first, second);
      }
    }
  }
  KnnGraph graph(data.rows, k);
  for (const Shard& shard : shards) {
    std::copy(shard.lists.ids.begin(), shard.lists.ids.end(), graph.ids.begin() + shard.first * k);
    std::copy(shard.lists.dists.begin(), shard.lists.dists.end(),
              graph.dists.begin() + shard.first * k);
  }
  return graph;
}

}  // namespace tsdg::cuda
