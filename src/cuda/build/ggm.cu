// GGM (Wang et al., 2021, section 5, Algorithm 3) on the device: every list keeps the
// first k/2 entries of its own side's graph (OLD) and gets k - k/2 random
// nodes of the other side (NEW); GNND then refines the lists matching only
// pairs from different sides; finally each list is merged with the whole
// original list of its side (the part that was set aside included).
// The incremental merge (ggm.h, ggm_merge_incremental) starts the indexed
// side's lists with their whole list, every entry OLD, so that an indexed
// list takes part in a join only once a batch row is offered to it, and the
// batch lists near their final ones (a greedy walk from a start row).
#include <algorithm>
#include <string>
#include <vector>

#include "distance.cuh"
#include "ggm.h"
#include "gnnd_workspace.h"
#include "gpu_algorithms.h"
#include "knn_lists.cuh"
#include "device_phase_trace.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

constexpr int kMergeWarpsPerBlock = 4;

template <Metric M>
__global__ void start_merge_lists_kernel(KnnListsView lists, int64_t nodes, int64_t split,
                                         const uint32_t* original_ids, const float* original_dists,
                                         const float* data, int dim, uint64_t seed) {
  const int64_t node = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (node >= nodes) return;
  const int k = lists.k;
  const int kept = k / 2;
  for (int j = 0; j < kept; ++j) {
    const uint32_t id = original_ids[node * k + j];
    if (id == kInvalidId) break;
    warp_insert_candidate(lists, static_cast<uint32_t>(node), id, original_dists[node * k + j], false);
  }
  const bool first_side = node < split;
  const int64_t other_begin = first_side ? split : 0;
  const int64_t other_count = first_side ? nodes - split : split;
  if (other_count == 0) return;
  const float* row = data + node * dim;
  for (int attempt = 0; attempt < k - kept; ++attempt) {
    const uint32_t candidate = static_cast<uint32_t>(
        other_begin + mix_hash(seed, static_cast<uint64_t>(node), static_cast<uint64_t>(attempt)) %
                          static_cast<uint64_t>(other_count));
    const float d = warp_distance<M>(row, data + static_cast<int64_t>(candidate) * dim, dim);
    warp_insert_candidate(lists, static_cast<uint32_t>(node), candidate, d, true);
  }
}

// Puts the first `count` entries of a list sorted by (distance, id), with
// distinct ids, into node's empty list, as inserting them one by one would
// (warp_insert_candidate: entry v in segment v % segments, each segment its
// best entries in order) without the locks and the shuffles of each insert.
// Stops at the first invalid id. Entries are OLD. A segment is sorted again after the
// placement, because distances computed again (an index keeps ids only) may
// order near ties differently from the list's order.
__device__ void warp_place_sorted_list(const KnnListsView& lists, uint32_t node, const uint32_t* ids,
                                       const float* dists, int count) {
  const int lane = lane_id();
  const int64_t base = static_cast<int64_t>(node) * lists.k;
  int valid = count;
  for (int first = 0; first < count; first += kWarpSize) {
    const int j = first + lane;
    const unsigned invalid = __ballot_sync(kFullMask, j < count && ids[j] == kInvalidId);
    if (invalid != 0) {
      valid = first + __ffs(invalid) - 1;
      break;
    }
  }
  for (int segment = 0; segment < lists.segments; ++segment) {
    const int start = segment * kSegmentSize;
    const int length = min(kSegmentSize, lists.k - start);
    int placed = 0;
    for (int first = 0; first < valid && placed < length; first += kWarpSize) {
      const int j = first + lane;
      const uint32_t id = j < valid ? ids[j] : kInvalidId;
      const bool here = id != kInvalidId && static_cast<int>(id % static_cast<uint32_t>(lists.segments)) == segment;
      const unsigned ballot = __ballot_sync(kFullMask, here);
      const int position = placed + __popc(ballot & ((1u << lane) - 1u));
      if (here && position < length) {
        lists.ids[base + start + position] = id;
        lists.dists[base + start + position] = dists[j];
      }
      placed += __popc(ballot);
    }
    __syncwarp();
    uint32_t id = lane < length ? lists.ids[base + start + lane] : kInvalidId;
    float d = lane < length ? lists.dists[base + start + lane] : INFINITY;
    if (id == kInvalidId) d = INFINITY;
    warp_bitonic_sort(d, id);
    if (lane < length) {
      lists.ids[base + start + lane] = id;
      lists.dists[base + start + lane] = d;
    }
    __syncwarp();
  }
}

// The incremental merge's start: a warp per list. An indexed row (below
// split) keeps its whole list as OLD; a batch row keeps the first k - k/2
// entries of its own list as OLD and is offered, as NEW, the indexed rows a
// greedy walk on the indexed k-NN graph meets from its start row (its
// nearest pivot; ggm.h) towards it, or k/2 random indexed rows without
// start rows.
template <Metric M>
__global__ void start_incremental_lists_kernel(KnnListsView lists, int64_t nodes, int64_t split,
                                               const uint32_t* original_ids,
                                               const float* original_dists, const float* data,
                                               int dim, const uint32_t* batch_starts, uint64_t seed) {
  const int64_t node = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (node >= nodes) return;
  const int k = lists.k;
  const bool indexed = node < split;
  const int kept = indexed ? k : k - k / 2;
  warp_place_sorted_list(lists, static_cast<uint32_t>(node), original_ids + node * k, original_dists + node * k,
                         kept);
  if (indexed) return;
  const float* row = data + node * dim;
  if (batch_starts == nullptr) {
    for (int attempt = 0; attempt < k / 2; ++attempt) {
      const uint32_t candidate = static_cast<uint32_t>(
          mix_hash(seed, static_cast<uint64_t>(node), static_cast<uint64_t>(attempt)) %
          static_cast<uint64_t>(split));
      const float d = warp_distance<M>(row, data + static_cast<int64_t>(candidate) * dim, dim);
      warp_insert_candidate(lists, static_cast<uint32_t>(node), candidate, d, true);
    }
    return;
  }
  uint32_t at = batch_starts[node - split];
  float at_dist = warp_distance<M>(row, data + static_cast<int64_t>(at) * dim, dim);
  warp_insert_candidate(lists, static_cast<uint32_t>(node), at, at_dist, true);
  for (int step = 0; step < kMergeSeedWalkSteps; ++step) {
    uint32_t next = at;
    float next_dist = at_dist;
    for (int j = 0; j < k; ++j) {
      const uint32_t v = original_ids[static_cast<int64_t>(at) * k + j];
      if (v == kInvalidId) continue;
      const float d = warp_distance<M>(row, data + static_cast<int64_t>(v) * dim, dim);
      warp_insert_candidate(lists, static_cast<uint32_t>(node), v, d, true);
      if (d < next_dist) {
        next = v;
        next_dist = d;
      }
    }
    if (next == at) break;
    at = next;
    at_dist = next_dist;
  }
}

// The power of two that a warp sorts the refined and the original list of a
// node in (2k entries, padded).
int merge_sort_width(int k) {
  int width = 1;
  while (width < 2 * k) width *= 2;
  return width;
}

// A warp per list: the k best distinct entries of the refined list and the
// original list, sorted. Both lists go into shared memory and a bitonic sort
// orders them by (distance, id); an id held by both lists has the same
// distance in both (the refinement only adds ids from the other side, and
// starts from the original entries), so its copies end up adjacent.
__global__ void merge_with_original_kernel(uint32_t* ids, float* dists, const uint32_t* original_ids,
                                           const float* original_dists, int64_t nodes, int k,
                                           int width) {
  extern __shared__ unsigned char shared_raw[];
  const int warp_in_block = threadIdx.x / kWarpSize;
  const int64_t node = static_cast<int64_t>(blockIdx.x) * kMergeWarpsPerBlock + warp_in_block;
  if (node >= nodes) return;
  float* local_dists = reinterpret_cast<float*>(shared_raw) + static_cast<size_t>(warp_in_block) * 2 * width;
  uint32_t* local_ids = reinterpret_cast<uint32_t*>(local_dists + width);
  const int64_t base = node * k;
  for (int i = lane_id(); i < width; i += kWarpSize) {
    uint32_t id = kInvalidId;
    float d = INFINITY;
    if (i < k) {
      id = entry_id(ids[base + i]);
      d = dists[base + i];
    } else if (i < 2 * k) {
      id = original_ids[base + i - k];
      d = original_dists[base + i - k];
    }
    local_ids[i] = id;
    local_dists[i] = id == kInvalidId ? INFINITY : d;
  }
  __syncwarp();
  for (int size = 2; size <= width; size *= 2) {
    for (int stride = size / 2; stride > 0; stride /= 2) {
      for (int pair = lane_id(); pair < width / 2; pair += kWarpSize) {
        const int lo = (pair / stride) * 2 * stride + pair % stride;
        const int hi = lo + stride;
        const bool ascending = (lo & size) == 0;
        const bool out_of_order = ascending ? pair_less(local_dists[hi], local_ids[hi], local_dists[lo], local_ids[lo])
                                            : pair_less(local_dists[lo], local_ids[lo], local_dists[hi], local_ids[hi]);
        if (out_of_order) {
          const float d = local_dists[lo];
          const uint32_t id = local_ids[lo];
          local_dists[lo] = local_dists[hi];
          local_ids[lo] = local_ids[hi];
          local_dists[hi] = d;
          local_ids[hi] = id;
        }
      }
      __syncwarp();
    }
  }
  int written = 0;
  for (int first = 0; first < width && written < k; first += kWarpSize) {
    const int i = first + lane_id();
    const uint32_t id = i < width ? local_ids[i] : kInvalidId;
    const bool keep = id != kInvalidId && (i == 0 || local_ids[i - 1] != id);
    const unsigned kept = __ballot_sync(kFullMask, keep);
    const int position = written + __popc(kept & ((1u << lane_id()) - 1u));
    if (keep && position < k) {
      ids[base + position] = id;
      dists[base + position] = local_dists[i];
    }
    written += __popc(kept);
  }
  for (int i = written + lane_id(); i < k; i += kWarpSize) {
    ids[base + i] = kInvalidId;
    dists[base + i] = INFINITY;
  }
}

// The lists of both sides with global ids: second's ids move past split.
KnnGraph global_lists(int64_t split, const KnnGraph& first, const KnnGraph& second) {
  const int k = first.nodes > 0 ? first.k : second.k;
  KnnGraph original(split + second.nodes, k);
  std::copy(first.ids.begin(), first.ids.end(), original.ids.begin());
  std::copy(first.dists.begin(), first.dists.end(), original.dists.begin());
  std::copy(second.dists.begin(), second.dists.end(), original.dists.begin() + split * k);
  const std::vector<uint32_t> moved = ids_past(second, split);
  std::copy(moved.begin(), moved.end(), original.ids.begin() + split * k);
  return original;
}

void check_merge_shapes(MatrixView data, int64_t split, const KnnGraph& first,
                        const KnnGraph& second, int k) {
  if (split < 0 || split > data.rows || first.nodes != split || second.nodes != data.rows - split) {
    throw Error(Status::InvalidArgument, "GGM: graph sizes do not match the split");
  }
  if (first.k != k || second.k != k) {
    throw Error(Status::InvalidArgument, "GGM: both graphs need params.k neighbors per list");
  }
  if (data.rows >= static_cast<int64_t>(kIdMask)) {
    throw Error(Status::InvalidArgument, "too many rows for 31-bit ids");
  }
}

// GNND iterations matching only pairs across split on the lists in ws, which
// start_lists fills, then every list merged with its original (device
// arrays, global ids): ws ends with the merged lists, sorted, flags cleared.
// Returns the iterations run.
template <class StartLists>
int refine_across_sides(DeviceContext& ctx, GnndWorkspace& ws, const float* rows, int dim,
                        int64_t split, const uint32_t* original_ids, const float* original_dists,
                        Metric metric, const GnndParams& params, const RunControl& control,
                        int first_side_old_samples, StartLists start_lists) {
  cudaStream_t stream = ctx.stream.get();
  PhaseTrace trace("ggm ", stream);
  ws.clear(stream);
  start_lists(ws.view());
  trace.mark("start lists");
  const int iterations =
      run_gnnd_iterations(ctx, ws, rows, dim, metric, params, split, control, first_side_old_samples);
  trace.mark("refinement");
  const int width = merge_sort_width(ws.k);
  const size_t shared_bytes = static_cast<size_t>(kMergeWarpsPerBlock) * 2 * width * sizeof(float);
  merge_with_original_kernel<<<static_cast<unsigned>((ws.nodes + kMergeWarpsPerBlock - 1) / kMergeWarpsPerBlock),
                               kMergeWarpsPerBlock * kWarpSize, shared_bytes, stream>>>(
      ws.ids.data(), ws.dists.data(), original_ids, original_dists, ws.nodes, ws.k, width);
  check_launch("merge_with_original_kernel");
  trace.mark("merge with originals");
  return iterations;
}

unsigned warp_per_list_grid(int64_t n) { return static_cast<unsigned>((n * kWarpSize + 255) / 256); }

}  // namespace

std::vector<uint32_t> ids_past(const KnnGraph& graph, int64_t offset) {
  std::vector<uint32_t> moved(graph.ids.size());
  for (size_t i = 0; i < moved.size(); ++i) {
    const uint32_t id = graph.ids[i];
    moved[i] = id == kInvalidId ? kInvalidId : static_cast<uint32_t>(id + offset);
  }
  return moved;
}

KnnGraph ggm_merge(DeviceContext& ctx, MatrixView data, int64_t split, const KnnGraph& first,
                   const KnnGraph& second, Metric metric, const GnndParams& params,
                   const RunControl& control) {
  check_merge_shapes(data, split, first, second, params.k);
  const int64_t n = data.rows;
  const int k = params.k;
  KnnGraph original = global_lists(split, first, second);
  if (split == 0 || split == n) return original;
  const int p = checked_sample_count(params);
  require_device_memory(static_cast<size_t>(n) * data.dim * sizeof(float) +
                            GnndWorkspace::bytes_needed(n, k, p) + static_cast<size_t>(n) * k * 8,
                        "GGM of this set");
  cudaStream_t stream = ctx.stream.get();
  DeviceMatrix rows = DeviceMatrix::upload(data, stream);
  DeviceBuffer<uint32_t> original_ids(original.ids.size());
  DeviceBuffer<float> original_dists(original.dists.size());
  copy_to_device(original_ids.data(), original.ids.data(), original.ids.size(), stream);
  copy_to_device(original_dists.data(), original.dists.data(), original.dists.size(), stream);
  GnndWorkspace ws(n, k, p);
  refine_across_sides(ctx, ws, rows.values.data(), data.dim, split, original_ids.data(),
                      original_dists.data(), metric, params, control, 0, [&](KnnListsView lists) {
                        dispatch_metric(metric, [&](auto tag) {
                          constexpr Metric M = decltype(tag)::value;
                          start_merge_lists_kernel<M><<<warp_per_list_grid(n), 256, 0, stream>>>(
                              lists, n, split, original_ids.data(), original_dists.data(),
                              rows.values.data(), data.dim, params.seed);
                          check_launch("start_merge_lists_kernel");
                        });
                      });
  KnnGraph merged(n, k, KnnGraph::Unfilled{});  // the copies write it whole
  copy_to_host(merged.ids.data(), ws.ids.data(), merged.ids.size(), stream);
  copy_to_host(merged.dists.data(), ws.dists.data(), merged.dists.size(), stream);
  ctx.stream.synchronize();
  return merged;
}

int ggm_merge_incremental_resident(DeviceContext& ctx, GnndWorkspace& ws, const float* rows, int dim,
                                   int64_t split, const uint32_t* original_ids,
                                   const float* original_dists, const uint32_t* batch_starts,
                                   Metric metric, const GnndParams& params, const RunControl& control) {
  const int64_t n = ws.nodes;
  GnndParams merge = params;
  merge.min_update_rate = incremental_merge_update_rate(params.min_update_rate, split, n - split, ws.k);
  cudaStream_t stream = ctx.stream.get();
  return refine_across_sides(ctx, ws, rows, dim, split, original_ids, original_dists, metric, merge,
                             control, kMergeOldRowOldSamples, [&](KnnListsView lists) {
                               dispatch_metric(metric, [&](auto tag) {
                                 constexpr Metric M = decltype(tag)::value;
                                 start_incremental_lists_kernel<M><<<warp_per_list_grid(n), 256, 0, stream>>>(
                                     lists, n, split, original_ids, original_dists, rows, dim,
                                     batch_starts, params.seed);
                                 check_launch("start_incremental_lists_kernel");
                               });
                             });
}

}  // namespace tsdg::cuda
