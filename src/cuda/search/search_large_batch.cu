// The large-batch search (Wang, Wang, Zhao, 2022, section 4.2, Algorithm 2): one block of
// one warp per query, started from the navigating entry set. In shared memory:
//   R  the ef best (distance, id) found, sorted, merged 32 candidates at a time
//   C  the expansion queue: kQueueSegments sorted arrays of 32, node e in
//      segment e % kQueueSegments; a pop takes the smallest head
//   V  the visited set: an open-addressing hash of every node scored, sized
//      by ef, so that a lookup costs a probe or two whatever ef is (a scan of
//      R for each neighbor grows with ef, and at a large ef it costs more
//      than the distances)
// Distances are computed by teams of 8 lanes, 4 candidates at a time.
#include <algorithm>

#include "device_memory.h"
#include "search_kernels.h"

namespace tsdg::cuda {
namespace {

constexpr int kQueueSegments = 8;
constexpr int kTeam = 8;
constexpr int kTeamsPerWarp = kWarpSize / kTeam;
constexpr int kMinVisitedBits = 8;
constexpr int kVisitedRoom = 128;

// log2 of V's slots. V is cleared and refilled with R's nodes once more than
// three quarters of it is taken (visited_refill): a node scored once and
// dropped from R is worse than R's last entry, which only improves, so
// scoring it again would change nothing. After a refill, at least
// kVisitedRoom inserts (several expansions) fit under the threshold, so
// that refills stay rare at every ef.
int visited_bits(int ef) {
  int bits = kMinVisitedBits;
  while ((1 << bits) / 4 * 3 < ef + kWarpSize + kVisitedRoom) ++bits;
  return bits;
}

struct LargeBatchLayout {
  int dim_padded;
  int ef;
  int visited_bits;
  size_t bytes() const {
    const size_t slots = size_t{1} << visited_bits;
    return static_cast<size_t>(dim_padded) * 4 + static_cast<size_t>(ef) * 16 +
           kQueueSegments * kWarpSize * 8 + kQueueSegments * 4 + slots * 4 + 16 +
           kWarpSize * 8;
  }
};

// Whether the count candidates in cand_ids (shared) hold the query's own
// row (SearchLaunch::own_row_first); warp-uniform.
__device__ __forceinline__ bool holds_own_row(const uint32_t* cand_ids, int count, int64_t own_row) {
  const int lane = lane_id();
  return own_row >= 0 && __any_sync(kFullMask, lane < count && cand_ids[lane] == static_cast<uint32_t>(own_row));
}

// Distances of the count candidates in cand_ids (shared) into cand_dists.
template <Metric M>
__device__ __forceinline__ void team_distances(const DeviceGraph& g, const float* query,
                                               const uint32_t* cand_ids, float* cand_dists, int count) {
  const int team = lane_id() / kTeam;
  for (int first = 0; first < count; first += kTeamsPerWarp) {
    const int index = first + team;
    const __half* row = index < count ? half_row(g.rows, cand_ids[index]) : nullptr;
    const float d = team_half_distance<M, kTeam>(query, row, g.rows);
    if (index < count && lane_id() % kTeam == 0) cand_dists[index] = d;
  }
  __syncwarp();
}

// Inserts (d, id) into its sorted queue segment; the segment's worst entry
// falls out when it is full. All lanes call it with the same arguments.
__device__ __forceinline__ void queue_push(float* queue_dists, uint32_t* queue_ids, int* queue_sizes,
                                           float d, uint32_t id) {
  const int lane = lane_id();
  const int segment = static_cast<int>(id % kQueueSegments);
  float* seg_dists = queue_dists + segment * kWarpSize;
  uint32_t* seg_ids = queue_ids + segment * kWarpSize;
  const int size = queue_sizes[segment];
  const float my_d = lane < size ? seg_dists[lane] : INFINITY;
  const uint32_t my_id = lane < size ? seg_ids[lane] : kInvalidId;
  const int position = __popc(__ballot_sync(kFullMask, lane < size && pair_less(my_d, my_id, d, id)));
  const float previous_d = __shfl_up_sync(kFullMask, my_d, 1);
  const uint32_t previous_id = __shfl_up_sync(kFullMask, my_id, 1);
  __syncwarp();
  if (position < kWarpSize) {
    if (lane == position) {
      seg_dists[lane] = d;
      seg_ids[lane] = id;
    } else if (lane > position && lane <= size) {
      seg_dists[lane] = previous_d;
      seg_ids[lane] = previous_id;
    }
    if (lane == 0) queue_sizes[segment] = min(size + 1, kWarpSize);
  }
  __syncwarp();
}

// Removes and returns the smallest head of the queue segments; kInvalidId
// when the queue is empty.
__device__ __forceinline__ uint32_t queue_pop(float* queue_dists, uint32_t* queue_ids,
                                              int* queue_sizes, float& popped_dist) {
  const int lane = lane_id();
  float d = INFINITY;
  uint32_t id = kInvalidId;
  if (lane < kQueueSegments && queue_sizes[lane] > 0) {
    d = queue_dists[lane * kWarpSize];
    id = queue_ids[lane * kWarpSize];
  }
  warp_arg_min(d, id);
  popped_dist = d;
  if (id == kInvalidId) return id;
  const int segment = static_cast<int>(id % kQueueSegments);
  float* seg_dists = queue_dists + segment * kWarpSize;
  uint32_t* seg_ids = queue_ids + segment * kWarpSize;
  const int size = queue_sizes[segment];
  const float next_d = lane + 1 < size ? seg_dists[lane + 1] : INFINITY;
  const uint32_t next_id = lane + 1 < size ? seg_ids[lane + 1] : kInvalidId;
  __syncwarp();
  if (lane + 1 < size) {
    seg_dists[lane] = next_d;
    seg_ids[lane] = next_id;
  }
  if (lane == 0) queue_sizes[segment] = size - 1;
  __syncwarp();
  return id;
}

// Inserts id into V of 2^bits slots (one lane's call); false when it was
// there.
__device__ __forceinline__ bool visited_insert(uint32_t* visited, int bits, uint32_t id) {
  const int slots = 1 << bits;
  uint32_t slot = (id * 2654435761u) >> (32 - bits);
  for (;;) {
    const uint32_t old = atomicCAS(visited + slot, kInvalidId, id);
    if (old == kInvalidId) return true;
    if (old == id) return false;
    slot = (slot + 1) & static_cast<uint32_t>(slots - 1);
  }
}

// Before up to kWarpSize more inserts: past three quarters of its slots, V
// becomes R's nodes only (warp-wide; see visited_bits).
__device__ __forceinline__ void visited_refill(uint32_t* visited, int bits, int& fill, const uint32_t* best_ids,
                                               int ef) {
  const int slots = 1 << bits;
  if (fill + kWarpSize <= slots - slots / 4) return;
  for (int i = lane_id(); i < slots; i += kWarpSize) visited[i] = kInvalidId;
  __syncwarp();
  fill = 0;
  for (int first = 0; first < ef; first += kWarpSize) {
    const int i = first + lane_id();
    const bool inserted = i < ef && best_ids[i] != kInvalidId && visited_insert(visited, bits, best_ids[i]);
    fill += __popc(__ballot_sync(kFullMask, inserted));
  }
  __syncwarp();
}

// Inserts each lane's candidate e (kInvalidId: none) into V; true for the
// lanes whose node was not there. Warp-wide.
__device__ __forceinline__ bool visited_take(uint32_t* visited, int bits, int& fill, const uint32_t* best_ids,
                                             int ef, uint32_t e) {
  visited_refill(visited, bits, fill, best_ids, ef);
  const bool fresh = e != kInvalidId && visited_insert(visited, bits, e);
  fill += __popc(__ballot_sync(kFullMask, fresh));
  __syncwarp();
  return fresh;
}

template <Metric M>
__global__ void __launch_bounds__(kWarpSize) large_batch_search_kernel(SearchLaunch launch, int visited_bits) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const DeviceGraph& g = launch.graph;
  const int64_t query_index = blockIdx.x;
  const int lane = lane_id();
  const int ef = launch.ef;
  const int dim_padded = half_row_stride(g.dim);
  float* query = reinterpret_cast<float*>(shared_raw);
  float* best_dists = query + dim_padded;
  uint32_t* best_ids = reinterpret_cast<uint32_t*>(best_dists + ef);
  float* spare_dists = reinterpret_cast<float*>(best_ids + ef);
  uint32_t* spare_ids = reinterpret_cast<uint32_t*>(spare_dists + ef);
  float* queue_dists = reinterpret_cast<float*>(spare_ids + ef);
  uint32_t* queue_ids = reinterpret_cast<uint32_t*>(queue_dists + kQueueSegments * kWarpSize);
  int* queue_sizes = reinterpret_cast<int*>(queue_ids + kQueueSegments * kWarpSize);
  uint32_t* visited = reinterpret_cast<uint32_t*>(queue_sizes + kQueueSegments);
  const int slots = 1 << visited_bits;
  int fill = 0;
  float* cand_dists = reinterpret_cast<float*>(visited + slots + 4);
  uint32_t* cand_ids = reinterpret_cast<uint32_t*>(cand_dists + kWarpSize);

  load_query(launch.queries + query_index * g.dim, g.dim, dim_padded, query);
  for (int i = lane; i < ef; i += kWarpSize) {
    best_dists[i] = INFINITY;
    best_ids[i] = kInvalidId;
  }
  if (lane < kQueueSegments) queue_sizes[lane] = 0;
  for (int i = lane; i < slots; i += kWarpSize) visited[i] = kInvalidId;
  __syncwarp();

  // Entry: the navigating set (the CPU search's entry points) is scored and
  // enters R, or the query's own entries with their distances; those that
  // stay in R start C. With well separated clusters the best of a few random
  // nodes (Alg. 2, lines 1-4) often lies in the wrong cluster, which the
  // graph rarely leaves.
  const int64_t own_row = launch.own_row_first >= 0 ? launch.own_row_first + query_index : -1;
  bool own_found = false;
  const int entries = entry_total(launch);
  const bool scored = entries_scored(launch);
  for (int first = 0; first < entries; first += kWarpSize) {
    const int i = first + lane;
    const uint32_t e = i < entries ? query_entry(launch, query_index, i) : kInvalidId;
    const bool fresh = visited_take(visited, visited_bits, fill, best_ids, ef, e);
    const unsigned fresh_mask = __ballot_sync(kFullMask, fresh);
    if (fresh) {
      const int at = __popc(fresh_mask & ((1u << lane) - 1u));
      cand_ids[at] = e;
      if (scored) cand_dists[at] = query_entry_distance(launch, query_index, i);
    }
    __syncwarp();
    const int count = __popc(fresh_mask);
    if (count == 0) continue;
    own_found |= holds_own_row(cand_ids, count, own_row);
    if (!scored) team_distances<M>(g, query, cand_ids, cand_dists, count);
    merge_into_best(best_dists, best_ids, spare_dists, spare_ids, ef, cand_dists, cand_ids, count);
  }
  for (int i = 0; i < min(ef, entries); ++i) {
    if (best_ids[i] != kInvalidId) queue_push(queue_dists, queue_ids, queue_sizes, best_dists[i], best_ids[i]);
  }

  const int best_k_index = min(launch.stop.k, ef) - 1;
  const int max_hops = 4 * ef + 64;
  for (int hop = 0; hop < max_hops && !own_found; ++hop) {
    float u_dist;
    const uint32_t u = queue_pop(queue_dists, queue_ids, queue_sizes, u_dist);
    if (u == kInvalidId) break;
    if (u_dist > best_dists[ef - 1] ||
        slack_stops(launch.stop, u_dist, best_dists[0], best_dists[best_k_index])) {
      break;
    }
    const uint32_t* list = g.neighbors + static_cast<int64_t>(u) * g.degree;
    const uint8_t* lambdas = g.lambdas + static_cast<int64_t>(u) * g.degree;
    for (int first = 0; first < g.degree; first += kWarpSize) {
      const int j = first + lane;
      uint32_t e = kInvalidId;
      if (j < g.degree && lambdas[j] <= launch.lambda_limit) e = list[j];
      const bool fresh = visited_take(visited, visited_bits, fill, best_ids, ef, e);
      const unsigned fresh_mask = __ballot_sync(kFullMask, fresh);
      if (fresh_mask == 0) continue;
      if (fresh) cand_ids[__popc(fresh_mask & ((1u << lane) - 1u))] = e;
      __syncwarp();
      const int count = __popc(fresh_mask);
      own_found |= holds_own_row(cand_ids, count, own_row);
      team_distances<M>(g, query, cand_ids, cand_dists, count);
      const float worst_before = best_dists[ef - 1];
      const uint32_t worst_id_before = best_ids[ef - 1];
      // Candidates that enter R also enter C (Alg. 2, lines 17-19).
      const float my_d = lane < count ? cand_dists[lane] : INFINITY;
      const uint32_t my_id = lane < count ? cand_ids[lane] : kInvalidId;
      unsigned entering =
          __ballot_sync(kFullMask, lane < count && pair_less(my_d, my_id, worst_before, worst_id_before));
      if (entering == 0) continue;
      merge_into_best(best_dists, best_ids, spare_dists, spare_ids, ef, cand_dists, cand_ids, count);
      while (entering != 0) {
        const int source = __ffs(entering) - 1;
        entering &= entering - 1;
        const float d = __shfl_sync(kFullMask, my_d, source);
        const uint32_t id = __shfl_sync(kFullMask, my_id, source);
        queue_push(queue_dists, queue_ids, queue_sizes, d, id);
      }
    }
  }
  const int k = launch.k;
  for (int i = lane; i < k; i += kWarpSize) {
    launch.ids[query_index * k + i] = i < ef ? best_ids[i] : kInvalidId;
    launch.dists[query_index * k + i] = i < ef ? best_dists[i] : INFINITY;
  }
}

}  // namespace

void launch_large_batch_search(const SearchLaunch& launch, cudaStream_t stream) {
  if (launch.rows == 0) return;
  LargeBatchLayout layout{half_row_stride(launch.graph.dim), launch.ef, visited_bits(launch.ef)};
  const size_t shared_bytes = layout.bytes();
  dispatch_metric(launch.metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    auto kernel = large_batch_search_kernel<M>;
    TSDG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
    kernel<<<static_cast<unsigned>(launch.rows), kWarpSize, shared_bytes, stream>>>(launch, layout.visited_bits);
    check_launch("large_batch_search_kernel");
  });
}

}  // namespace tsdg::cuda
