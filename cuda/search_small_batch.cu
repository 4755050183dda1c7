// The small-batch search (paper 003, section 4.1, Algorithm 1): each query
// gets `searches` blocks of 32 warps, each an independent greedy search from
// the best of 32 random nodes. Per step the 32 warps score the neighbors of
// the current node (warp w keeps the best it saw in R_temp[w]), warp 0 merges
// R_temp into the block's top-32 with a bitonic sort and moves to the best new
// node; a search stops when its top-32 no longer changes. A second kernel
// merges the searches of each query into its top k.
#include <algorithm>

#include "device_memory.h"
#include "search_kernels.h"

namespace tsdg::cuda {
namespace {

constexpr int kWarpsPerSearch = 32;
constexpr int kSearchThreads = kWarpsPerSearch * kWarpSize;
constexpr int kMaxGreedySteps = 64;
constexpr int kMergeWarps = 4;

template <Metric M>
__global__ void __launch_bounds__(kSearchThreads)
    greedy_searches_kernel(SearchLaunch launch, int searches, uint32_t* partial_ids,
                           float* partial_dists) {
  extern __shared__ __align__(16) float query[];
  __shared__ float temp_dists[kWarpsPerSearch];
  __shared__ uint32_t temp_ids[kWarpsPerSearch];
  __shared__ float top_dists[kWarpSize];
  __shared__ uint32_t top_ids[kWarpSize];
  __shared__ uint32_t current;
  __shared__ int improved;
  const DeviceGraph& g = launch.graph;
  const int64_t query_index = blockIdx.x / searches;
  const int search = static_cast<int>(blockIdx.x % searches);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = lane_id();
  load_query(launch.queries + query_index * g.dim, g.dim, query);

  // Entry: warp w scores random node w; the 32 start R and the best is u.
  {
    const uint32_t node = random_node(launch.seed, query_index, search, warp, g.nodes);
    const float d = warp_distance<M>(query, g.data + static_cast<int64_t>(node) * g.dim, g.dim);
    if (lane == 0) {
      temp_dists[warp] = d;
      temp_ids[warp] = node;
    }
  }
  __syncthreads();
  if (warp == 0) {
    float d = temp_dists[lane];
    uint32_t id = temp_ids[lane];
    warp_bitonic_sort(d, id);
    // A node drawn twice keeps one copy.
    const uint32_t previous = __shfl_up_sync(kFullMask, id, 1);
    if (lane > 0 && previous == id) {
      d = INFINITY;
      id = kInvalidId;
    }
    warp_bitonic_sort(d, id);
    top_dists[lane] = d;
    top_ids[lane] = id;
    if (lane == 0) current = id;
  }
  __syncthreads();

  for (int step = 0; step < kMaxGreedySteps; ++step) {
    const uint32_t u = current;
    const uint32_t* list = g.neighbors + static_cast<int64_t>(u) * g.degree;
    const uint8_t* lambdas = g.lambdas + static_cast<int64_t>(u) * g.degree;
    float best = INFINITY;
    uint32_t best_id = kInvalidId;
    for (int j = warp; j < g.degree; j += kWarpsPerSearch) {
      const uint32_t e = list[j];
      if (e == kInvalidId || lambdas[j] > launch.lambda_limit) continue;
      if (__any_sync(kFullMask, top_ids[lane] == e)) continue;  // already in R
      const float d = warp_distance<M>(query, g.data + static_cast<int64_t>(e) * g.dim, g.dim);
      if (pair_less(d, e, best, best_id)) {
        best = d;
        best_id = e;
      }
    }
    if (lane == 0) {
      temp_dists[warp] = best;
      temp_ids[warp] = best_id;
    }
    __syncthreads();
    if (warp == 0) {
      float d = temp_dists[lane];
      uint32_t id = temp_ids[lane];
      warp_bitonic_sort(d, id);
      const uint32_t next = __shfl_sync(kFullMask, id, 0);
      // The 32 smallest of R and R_temp: R ascending against R_temp
      // descending, lane by lane, leaves a bitonic sequence to sort.
      const float mirrored_d = __shfl_sync(kFullMask, d, kWarpSize - 1 - lane);
      const uint32_t mirrored_id = __shfl_sync(kFullMask, id, kWarpSize - 1 - lane);
      float top_d = top_dists[lane];
      uint32_t top_id = top_ids[lane];
      const bool take = pair_less(mirrored_d, mirrored_id, top_d, top_id);
      if (take) {
        top_d = mirrored_d;
        top_id = mirrored_id;
      }
      warp_bitonic_sort(top_d, top_id);
      top_dists[lane] = top_d;
      top_ids[lane] = top_id;
      const bool changed = __any_sync(kFullMask, take);
      if (lane == 0) {
        improved = changed && next != kInvalidId;
        current = next;
      }
    }
    __syncthreads();
    if (!improved) break;
  }
  if (warp == 0) {
    const int64_t slot = (query_index * searches + search) * kWarpSize + lane;
    partial_ids[slot] = top_ids[lane];
    partial_dists[slot] = top_dists[lane];
  }
}

// A warp per query: the k best distinct entries of its searches' top-32s.
__global__ void merge_searches_kernel(int64_t rows, int searches, int k, const uint32_t* partial_ids,
                                      const float* partial_dists, uint32_t* out_ids, float* out_dists) {
  extern __shared__ unsigned char shared_raw[];
  const int warp_in_block = threadIdx.x / kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeWarps + warp_in_block;
  if (row >= rows) return;
  const int lane = lane_id();
  const size_t per_warp = static_cast<size_t>(2 * k + kWarpSize) * 8;
  float* list_dists = reinterpret_cast<float*>(shared_raw + per_warp * warp_in_block);
  uint32_t* list_ids = reinterpret_cast<uint32_t*>(list_dists + k);
  float* spare_dists = reinterpret_cast<float*>(list_ids + k);
  uint32_t* spare_ids = reinterpret_cast<uint32_t*>(spare_dists + k);
  float* batch_dists = reinterpret_cast<float*>(spare_ids + k);
  uint32_t* batch_ids = reinterpret_cast<uint32_t*>(batch_dists + kWarpSize);
  for (int i = lane; i < k; i += kWarpSize) {
    list_dists[i] = INFINITY;
    list_ids[i] = kInvalidId;
  }
  __syncwarp();
  for (int s = 0; s < searches; ++s) {
    const int64_t slot = (row * searches + s) * kWarpSize + lane;
    float d = partial_dists[slot];
    uint32_t id = partial_ids[slot];
    bool drop = id == kInvalidId;
    for (int other = 0; other < kWarpSize; ++other) {
      const uint32_t other_id = __shfl_sync(kFullMask, id, other);
      drop |= other < lane && other_id == id;
    }
    for (int i = 0; i < k && !drop; ++i) drop = list_ids[i] == id;
    if (drop) {
      d = INFINITY;
      id = kInvalidId;
    }
    warp_bitonic_sort(d, id);
    batch_dists[lane] = d;
    batch_ids[lane] = id;
    __syncwarp();
    const int count = __popc(__ballot_sync(kFullMask, id != kInvalidId));
    warp_merge_sorted(list_dists, list_ids, k, batch_dists, batch_ids, count, spare_dists, spare_ids);
    for (int i = lane; i < k; i += kWarpSize) {
      list_dists[i] = spare_dists[i];
      list_ids[i] = spare_ids[i];
    }
    __syncwarp();
  }
  for (int i = lane; i < k; i += kWarpSize) {
    out_ids[row * k + i] = list_ids[i];
    out_dists[row * k + i] = list_dists[i];
  }
}

}  // namespace

void launch_small_batch_search(const SearchLaunch& launch, int searches, uint32_t* partial_ids,
                               float* partial_dists, cudaStream_t stream) {
  if (launch.rows == 0) return;
  const size_t query_bytes = static_cast<size_t>((launch.graph.dim + 3) & ~3) * sizeof(float);
  dispatch_metric(launch.metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    auto kernel = greedy_searches_kernel<M>;
    TSDG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(query_bytes)));
    kernel<<<static_cast<unsigned>(launch.rows * searches), kSearchThreads, query_bytes, stream>>>(
        launch, searches, partial_ids, partial_dists);
    check_launch("greedy_searches_kernel");
  });
  const size_t merge_bytes = static_cast<size_t>(kMergeWarps) * (2 * launch.k + kWarpSize) * 8;
  TSDG_CUDA_CHECK(cudaFuncSetAttribute(merge_searches_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(merge_bytes)));
  merge_searches_kernel<<<static_cast<unsigned>((launch.rows + kMergeWarps - 1) / kMergeWarps),
                          kMergeWarps * kWarpSize, merge_bytes, stream>>>(
      launch.rows, searches, launch.k, partial_ids, partial_dists, launch.ids, launch.dists);
  check_launch("merge_searches_kernel");
}

}  // namespace tsdg::cuda
