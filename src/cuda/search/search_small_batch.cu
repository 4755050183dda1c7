// The small-batch search: one block per query runs a best-first beam search
// over a sorted pool of the `ef` best nodes found so far, and each step
// expands the `width` best pool nodes not yet expanded at once (the itopk
// search of CAGRA, Ootomo et al. 2024). A step's width * degree neighbors are
// filtered by a visited hash in shared memory, scored by teams of 8 lanes
// (the whole block in parallel) and merged into the pool by rank; the search
// ends when every pool node is expanded.
//
// The small-batch kernel of Wang, Wang, Zhao, 2022 (section 4.1, Algorithm 1)
// runs many greedy walks per query that keep only their top 32 and never go
// back to a second-best node: on overlapping clusters of high intrinsic
// dimension those walks stop well under the CPU search's recall, and more
// walks only buy recall at the latency of the large-batch kernel. The beam
// search is the same search as the CPU's and the large-batch kernel's, so it
// reaches their recall at the same ef; expanding several nodes a step is what
// gives one query the block's parallelism.

#include <algorithm>
#include <string>

#include "device_memory.h"
#include "search_kernels.h"

namespace tsdg::cuda {
namespace {

constexpr int kBeamThreads = 512;
constexpr int kTeam = 8;
constexpr int kTeams = kBeamThreads / kTeam;
constexpr int kMaxCandidates = 256;  // width * degree per step
constexpr int kMaxWidth = 8;
constexpr int kDefaultWidth = 8;  // clamped to kMaxCandidates / degree
constexpr int kHashBits = 13;
constexpr int kHashSlots = 1 << kHashBits;
// Cleared (and refilled with the pool) past this fill, so that one more step
// or chunk of entries always finds free slots.
constexpr int kHashRefill = kHashSlots / 2;

struct BeamLayout {
  int dim_padded;
  int pool;  // ef entries
  size_t bytes() const {
    return static_cast<size_t>(dim_padded) * 4 + static_cast<size_t>(pool) * 2 * 8 +
           static_cast<size_t>(kMaxCandidates) * 8 + static_cast<size_t>(kHashSlots) * 4 +
           static_cast<size_t>(pool) * 2;
  }
};

// The pool: sorted (distance, id) pairs plus whether each node was expanded;
// `next` receives the merge, then the two swap.
struct Pool {
  float* dists;
  uint32_t* ids;
  uint8_t* expanded;
  float* next_dists;
  uint32_t* next_ids;
  uint8_t* next_expanded;

  __device__ void swap() {
    float* d = dists;
    dists = next_dists;
    next_dists = d;
    uint32_t* i = ids;
    ids = next_ids;
    next_ids = i;
    uint8_t* e = expanded;
    expanded = next_expanded;
    next_expanded = e;
  }
};

// Inserts id into the open-addressing visited hash; false when it was there.
__device__ __forceinline__ bool hash_insert(uint32_t* hash, int* fill, uint32_t id) {
  uint32_t slot = (id * 2654435761u) >> (32 - kHashBits);
  for (;;) {
    const uint32_t old = atomicCAS(hash + slot, kInvalidId, id);
    if (old == kInvalidId) {
      atomicAdd(fill, 1);
      return true;
    }
    if (old == id) return false;
    slot = (slot + 1) & (kHashSlots - 1);
  }
}

// Block-wide. A node scored once and dropped from the pool is worse than the
// pool's last entry, which only improves, so forgetting it loses nothing; the
// pool's own nodes stay in the hash.
__device__ void refill_hash_if_full(uint32_t* hash, int* fill, const Pool& pool, int pool_size) {
  if (*fill <= kHashRefill) return;  // uniform: read after a barrier
  __syncthreads();
  for (int i = threadIdx.x; i < kHashSlots; i += blockDim.x) hash[i] = kInvalidId;
  if (threadIdx.x == 0) *fill = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pool_size; i += blockDim.x) {
    if (pool.ids[i] != kInvalidId) hash_insert(hash, fill, pool.ids[i]);
  }
  __syncthreads();
}

// Distances of the count candidates (block-wide; count is uniform).
template <Metric M>
__device__ __forceinline__ void score_candidates(const DeviceGraph& g, const float* query,
                                                 const uint32_t* cand_ids, float* cand_dists, int count) {
  const int team = threadIdx.x / kTeam;
  for (int first = 0; first < count; first += kTeams) {
    const int index = first + team;
    const __half* row = index < count ? half_row(g.rows, cand_ids[index]) : nullptr;
    const float d = team_half_distance<M, kTeam>(query, row, g.rows);
    if (index < count && threadIdx.x % kTeam == 0) cand_dists[index] = d;
  }
}

// The pool becomes the pool_size best of pool and candidates (block-wide).
// Every entry's new position is its rank in the union: its index in its own
// sorted list (the candidates' ranks are counted, they are not sorted) plus
// the entries of the other list before it. The ids are distinct (the hash),
// and the unused pool entries (+inf, invalid) come after every candidate, so
// the positions are a permutation.
__device__ void merge_candidates(Pool& pool, int pool_size, const float* cand_dists,
                                 const uint32_t* cand_ids, int count) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    const float d = cand_dists[i];
    const uint32_t id = cand_ids[i];
    int position = rank_in_sorted(pool.dists, pool.ids, pool_size, d, id, false);
    if (position >= pool_size) continue;
    for (int j = 0; j < count; ++j) position += pair_less(cand_dists[j], cand_ids[j], d, id);
    if (position < pool_size) {
      pool.next_dists[position] = d;
      pool.next_ids[position] = id;
      pool.next_expanded[position] = 0;
    }
  }
  for (int i = threadIdx.x; i < pool_size; i += blockDim.x) {
    const float d = pool.dists[i];
    const uint32_t id = pool.ids[i];
    int position = i;
    for (int j = 0; j < count && position < pool_size; ++j) {
      position += pair_less(cand_dists[j], cand_ids[j], d, id);
    }
    if (position < pool_size) {
      pool.next_dists[position] = d;
      pool.next_ids[position] = id;
      pool.next_expanded[position] = pool.expanded[i];
    }
  }
  __syncthreads();
  pool.swap();
}

template <Metric M>
__global__ void __launch_bounds__(kBeamThreads)
    beam_search_kernel(SearchLaunch launch, int pool_size, int width) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  __shared__ uint32_t expand_ids[kMaxWidth];
  __shared__ int expand_count;
  __shared__ int cand_count;
  __shared__ int hash_fill;
  __shared__ int own_found;  // SearchLaunch::own_row_first
  const DeviceGraph& g = launch.graph;
  const int64_t query_index = blockIdx.x;
  const int dim_padded = half_row_stride(g.dim);
  float* query = reinterpret_cast<float*>(shared_raw);
  Pool pool;
  pool.dists = query + dim_padded;
  pool.ids = reinterpret_cast<uint32_t*>(pool.dists + pool_size);
  pool.next_dists = reinterpret_cast<float*>(pool.ids + pool_size);
  pool.next_ids = reinterpret_cast<uint32_t*>(pool.next_dists + pool_size);
  float* cand_dists = reinterpret_cast<float*>(pool.next_ids + pool_size);
  uint32_t* cand_ids = reinterpret_cast<uint32_t*>(cand_dists + kMaxCandidates);
  uint32_t* hash = cand_ids + kMaxCandidates;
  pool.expanded = reinterpret_cast<uint8_t*>(hash + kHashSlots);
  pool.next_expanded = pool.expanded + pool_size;

  for (int i = threadIdx.x; i < pool_size; i += blockDim.x) {
    pool.dists[i] = INFINITY;
    pool.ids[i] = kInvalidId;
    pool.expanded[i] = 1;  // never picked
  }
  for (int i = threadIdx.x; i < kHashSlots; i += blockDim.x) hash[i] = kInvalidId;
  if (threadIdx.x == 0) {
    hash_fill = 0;
    own_found = 0;
  }
  const uint32_t own_row = launch.own_row_first >= 0 ? static_cast<uint32_t>(launch.own_row_first + query_index)
                                                     : kInvalidId;
  load_query(launch.queries + query_index * g.dim, g.dim, dim_padded, query);  // ends with a barrier

  // The navigating entry set (the CPU and large-batch searches' entries), or
  // the query's own entries with their distances, fills the pool first.
  const int entries = entry_total(launch);
  const bool scored = entries_scored(launch);
  for (int first = 0; first < entries; first += kMaxCandidates) {
    refill_hash_if_full(hash, &hash_fill, pool, pool_size);
    if (threadIdx.x == 0) cand_count = 0;
    __syncthreads();
    const int chunk = min(kMaxCandidates, entries - first);
    if (threadIdx.x < chunk) {
      const int i = first + threadIdx.x;
      const uint32_t e = query_entry(launch, query_index, i);
      if (e != kInvalidId && hash_insert(hash, &hash_fill, e)) {
        const int at = atomicAdd(&cand_count, 1);
        cand_ids[at] = e;
        if (scored) cand_dists[at] = query_entry_distance(launch, query_index, i);
        if (e == own_row) own_found = 1;
      }
    }
    __syncthreads();
    const int count = cand_count;
    if (!scored) score_candidates<M>(g, query, cand_ids, cand_dists, count);
    __syncthreads();
    merge_candidates(pool, pool_size, cand_dists, cand_ids, count);
  }

  const int warp = threadIdx.x / kWarpSize;
  const int lane = lane_id();
  const int best_k_index = min(launch.stop.k, pool_size) - 1;
  const int max_steps = 4 * pool_size / width + 32;
  for (int step = 0; step < max_steps && own_found == 0; ++step) {
    // Warp 0 takes the width best nodes not expanded yet.
    if (warp == 0) {
      int taken = 0;
      float first_dist = INFINITY;
      for (int base = 0; base < pool_size && taken < width; base += kWarpSize) {
        const int i = base + lane;
        unsigned open = __ballot_sync(kFullMask, i < pool_size && !pool.expanded[i] && pool.ids[i] != kInvalidId);
        while (open != 0 && taken < width) {
          const int at = base + __ffs(open) - 1;
          open &= open - 1;
          if (taken == 0) first_dist = pool.dists[at];
          if (lane == 0) {
            expand_ids[taken] = pool.ids[at];
            pool.expanded[at] = 1;
          }
          ++taken;
        }
      }
      if (lane == 0) {
        const bool stop = taken > 0 && slack_stops(launch.stop, first_dist, pool.dists[0], pool.dists[best_k_index]);
        expand_count = stop ? 0 : taken;
        cand_count = 0;
      }
    }
    __syncthreads();
    const int expanding = expand_count;
    if (expanding == 0) break;
    refill_hash_if_full(hash, &hash_fill, pool, pool_size);
    for (int t = threadIdx.x; t < expanding * g.degree; t += blockDim.x) {
      const int64_t slot = static_cast<int64_t>(expand_ids[t / g.degree]) * g.degree + t % g.degree;
      const uint32_t e = g.neighbors[slot];
      if (e == kInvalidId || g.lambdas[slot] > launch.lambda_limit) continue;
      if (hash_insert(hash, &hash_fill, e)) {
        cand_ids[atomicAdd(&cand_count, 1)] = e;
        if (e == own_row) own_found = 1;
      }
    }
    __syncthreads();
    const int count = cand_count;
    if (count == 0) {
      __syncthreads();  // everyone has read cand_count before warp 0 resets it
      continue;
    }
    score_candidates<M>(g, query, cand_ids, cand_dists, count);
    __syncthreads();
    merge_candidates(pool, pool_size, cand_dists, cand_ids, count);
  }

  const int k = launch.k;
  for (int i = threadIdx.x; i < k; i += blockDim.x) {
    launch.ids[query_index * k + i] = pool.ids[i];
    launch.dists[query_index * k + i] = pool.dists[i];
  }
}

}  // namespace

void launch_small_batch_search(const SearchLaunch& launch, int width, cudaStream_t stream) {
  if (launch.rows == 0) return;
  if (launch.ef > kGpuSmallBatchMaxEf || launch.k > launch.ef) {
    throw Error(Status::InvalidArgument, "the small-batch search needs k <= ef <= " +
                                             std::to_string(kGpuSmallBatchMaxEf));
  }
  if (launch.graph.degree > kMaxCandidates) {
    throw Error(Status::InvalidArgument, "the small-batch search supports a degree up to " +
                                             std::to_string(kMaxCandidates));
  }
  if (width < 1) width = kDefaultWidth;
  width = std::clamp(width, 1, std::min(kMaxWidth, kMaxCandidates / launch.graph.degree));
  const BeamLayout layout{half_row_stride(launch.graph.dim), launch.ef};
  const size_t shared_bytes = layout.bytes();
  dispatch_metric(launch.metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    auto kernel = beam_search_kernel<M>;
    TSDG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
    kernel<<<static_cast<unsigned>(launch.rows), kBeamThreads, shared_bytes, stream>>>(launch, layout.pool,
                                                                                       width);
    check_launch("beam_search_kernel");
  });
}

}  // namespace tsdg::cuda
