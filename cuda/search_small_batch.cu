// The small-batch search (paper 003, section 4.1, Algorithm 1): each query
// gets `searches` blocks of 32 warps, each an independent greedy search. Per
// step the 32 warps score the neighbors of the current node (warp w keeps the
// best it saw in R_temp[w]), warp 0 merges R_temp into the block's top-32 with
// a bitonic sort and moves to the best new node; a search stops when its
// top-32 no longer changes. A second kernel merges the searches of each query
// into its top k.
// The paper starts each search from the best of 32 random nodes; on
// clustered data most such starts lie in the wrong cluster and the greedy
// walk never leaves it. Here every block also scores the index's navigating
// entry set (the entries of the large-batch and CPU searches), and search s
// draws the entry ranked s together with 31 random nodes: the searches start
// from different good entries, and the random part of R keeps them from
// stopping before they have walked (a list of only good entries ends a walk
// at its first step).

#include <algorithm>

#include "device_memory.h"
#include "search_kernels.h"

namespace tsdg::cuda {
namespace {

constexpr int kWarpsPerSearch = 32;
constexpr int kSearchThreads = kWarpsPerSearch * kWarpSize;
constexpr int kMaxGreedySteps = 64;
constexpr int kMergeWarps = 4;
// Entries scored per block: the shared-memory cap (8 bytes an entry).
constexpr int kMaxEntries = 2048;

int scored_entries(const SearchLaunch& launch) { return std::min(launch.entry_count, kMaxEntries); }

template <Metric M>
__global__ void __launch_bounds__(kSearchThreads)
    greedy_searches_kernel(SearchLaunch launch, int searches, int entries, uint32_t* partial_ids,
                           float* partial_dists) {
  extern __shared__ __align__(16) float shared[];
  __shared__ float temp_dists[kWarpsPerSearch];
  __shared__ uint32_t temp_ids[kWarpsPerSearch];
  __shared__ float top_dists[kWarpSize];
  __shared__ uint32_t top_ids[kWarpSize];
  __shared__ uint32_t current;
  __shared__ uint32_t start;
  __shared__ int improved;
  const DeviceGraph& g = launch.graph;
  float* query = shared;
  float* entry_dists = shared + ((g.dim + 3) & ~3);
  uint32_t* entry_ids = reinterpret_cast<uint32_t*>(entry_dists + entries);
  const int64_t query_index = blockIdx.x / searches;
  const int search = static_cast<int>(blockIdx.x % searches);
  const int warp = threadIdx.x / kWarpSize;
  const int lane = lane_id();
  load_query(launch.queries + query_index * g.dim, g.dim, query);

  for (int i = warp; i < entries; i += kWarpsPerSearch) {
    const uint32_t node = launch.entries[i];
    const float d = warp_distance<M>(query, g.data + static_cast<int64_t>(node) * g.dim, g.dim);
    if (lane == 0) {
      entry_dists[i] = d;
      entry_ids[i] = node;
    }
  }
  if (threadIdx.x == 0) start = kInvalidId;
  __syncthreads();
  // The entry ranked `search` among the entries (by distance, then id).
  const int start_rank = search % entries;
  for (int i = threadIdx.x; i < entries; i += kSearchThreads) {
    const float d = entry_dists[i];
    const uint32_t id = entry_ids[i];
    int rank = 0;
    for (int j = 0; j < entries; ++j) rank += pair_less(entry_dists[j], entry_ids[j], d, id);
    if (rank == start_rank) start = id;
  }
  __syncthreads();

  // R: the start entry and 31 random nodes (the paper's random draw keeps
  // the searches' lists apart); u is the best of them.
  {
    const uint32_t node = warp == kWarpsPerSearch - 1 && start != kInvalidId
                              ? start
                              : random_node(launch.seed, query_index, search, warp, g.nodes);
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
  const int entries = scored_entries(launch);
  if (entries < 1) throw Error(Status::InvalidArgument, "the small-batch search needs entry points");
  const size_t shared_bytes =
      static_cast<size_t>((launch.graph.dim + 3) & ~3) * sizeof(float) + static_cast<size_t>(entries) * 8;
  dispatch_metric(launch.metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    auto kernel = greedy_searches_kernel<M>;
    TSDG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
    kernel<<<static_cast<unsigned>(launch.rows * searches), kSearchThreads, shared_bytes, stream>>>(
        launch, searches, entries, partial_ids, partial_dists);
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
