// GNND (Wang et al., 2021, section 4) on the device: per iteration
//   sample_lists        p closest NEW and p closest OLD per list (sampled NEW become OLD)
//   add_reverse_samples reverse samples appended with atomics up to 2p
//   dedupe_samples      a warp per sample list drops repeated ids
//   cross_match         a block per node (eight warps in a build, four in a
//                       merge): NEW-NEW distances with
//                       the triangular thread mapping, NEW-OLD 2 x 2 entries a
//                       thread (in a merge only the pairs across the split),
//                       both in shared memory over tiles of 32 dimensions,
//                       the next tile's rows gathered while one is scored; then
//                       a warp-shuffle arg-min per sample and one insertion of
//                       that nearest pair into the segmented lists
// until the number of successful insertions falls under the update rate.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "distance.cuh"
#include "gnnd_workspace.h"
#include "gpu_algorithms.h"
#include "knn_lists.cuh"
#include "pairwise.cuh"
#include "device_phase_trace.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

// A cross-match block of a merge is four warps: most of a merge's lists have
// few samples, and the kernel waits on its rows' gathers, so more lists in
// flight pay more than more threads a list. A build's lists have all their
// samples, and the shared memory of their block already limits the blocks an
// SM holds: there eight warps a block keep more gathers in flight.
constexpr int kMergeCrossThreads = 128;
constexpr int kBuildCrossThreads = 256;
constexpr int kDimTile = 32;
constexpr int kListWarpsPerBlock = 4;

__global__ void clear_lists_kernel(uint32_t* ids, float* dists, int64_t entries, int* locks,
                                   int64_t lock_count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < entries;
       i += stride) {
    ids[i] = kInvalidId;
    dists[i] = INFINITY;
  }
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < lock_count;
       i += stride) {
    locks[i] = 0;
  }
}

template <Metric M>
__global__ void fill_random_lists_kernel(KnnListsView lists, int64_t nodes, const float* data,
                                         int dim, uint64_t seed) {
  const int64_t node = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (node >= nodes || nodes < 2) return;
  const float* row = data + node * dim;
  for (int attempt = 0; attempt < lists.k; ++attempt) {
    uint64_t pick = mix_hash(seed, static_cast<uint64_t>(node), static_cast<uint64_t>(attempt)) %
                    static_cast<uint64_t>(nodes - 1);
    if (pick >= static_cast<uint64_t>(node)) ++pick;  // never the node itself
    const uint32_t candidate = static_cast<uint32_t>(pick);
    const float d = warp_distance<M>(row, data + static_cast<int64_t>(candidate) * dim, dim);
    warp_insert_candidate(lists, static_cast<uint32_t>(node), candidate, d, true);
  }
}

constexpr int kMaxSegments = (kMaxGnndK + kSegmentSize - 1) / kSegmentSize;

// The bits below bit `count` (count 0 to 32).
__device__ __forceinline__ unsigned low_bits(int count) { return count >= 32 ? kFullMask : (1u << count) - 1u; }

// Writes to list, from its start and in order (round by round, lane by
// lane), the values the warp keeps; returns how many. Warp-wide.
template <int kRounds>
__device__ __forceinline__ int warp_compact(uint32_t* list, const uint32_t (&values)[kRounds],
                                            const bool (&keep)[kRounds]) {
  int kept = 0;
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    const unsigned mask = __ballot_sync(kFullMask, keep[r]);
    if (keep[r]) list[kept + __popc(mask & low_bits(lane_id()))] = values[r];
    kept += __popc(mask);
  }
  return kept;
}

// A warp per list: the p closest NEW and the p closest OLD entries become the
// forward samples; the sampled NEW entries are marked OLD. A node below
// capped_end takes only the capped_old closest of its OLD entries below
// capped_end. An entry's rank among the entries of its kind comes from the
// list's segments, each sorted by (distance, id) (knn_lists.cuh): within
// its own segment its lane, in another a binary search, the kind's entries
// counted by a ballot mask of each segment.
__global__ void sample_lists_kernel(KnnListsView lists, int64_t nodes, int samples,
                                    int64_t capped_end, int capped_old,
                                    uint32_t* new_samples, uint32_t* old_samples, int* forward_new,
                                    int* forward_old, int* total_new, int* total_old) {
  extern __shared__ unsigned char shared_raw[];
  const int warp_in_block = threadIdx.x / kWarpSize;
  const int64_t node = static_cast<int64_t>(blockIdx.x) * kListWarpsPerBlock + warp_in_block;
  if (node >= nodes) return;
  const int k = lists.k;
  const int lane = lane_id();
  float* dists = reinterpret_cast<float*>(shared_raw) + static_cast<size_t>(warp_in_block) * 2 * k;
  uint32_t* ids = reinterpret_cast<uint32_t*>(dists + k);  // without the NEW flag
  const int64_t base = node * k;
  const int stride = 2 * samples;
  const bool capped = node < capped_end;
  const int old_limit = capped ? capped_old : samples;
  uint32_t entries[kMaxSegments];
  unsigned new_masks[kMaxSegments];
  unsigned old_masks[kMaxSegments];
#pragma unroll
  for (int s = 0; s < kMaxSegments; ++s) {
    const int i = s * kSegmentSize + lane;
    entries[s] = i < k ? lists.ids[base + i] : kInvalidId;
    if (i < k) {
      dists[i] = lists.dists[base + i];
      ids[i] = entry_id(entries[s]);
    }
    // an entry the node may sample: its OLD ones past capped_end cannot meet its NEW samples
    const bool is_new = entry_new(entries[s]);
    const bool valid = entry_valid(entries[s]) && (is_new || !capped || entry_id(entries[s]) < capped_end);
    new_masks[s] = __ballot_sync(kFullMask, valid && is_new);
    old_masks[s] = __ballot_sync(kFullMask, valid && !is_new);
  }
  __syncwarp();
  int new_count = 0;
  int old_count = 0;
#pragma unroll
  for (int s = 0; s < kMaxSegments; ++s) {
    const int i = s * kSegmentSize + lane;
    const uint32_t entry = entries[s];
    const bool is_new = entry_new(entry);
    const unsigned own_kind = is_new ? new_masks[s] : old_masks[s];
    if ((own_kind >> lane) & 1u) {
      int rank = __popc(own_kind & low_bits(lane));
#pragma unroll
      for (int t = 0; t < kMaxSegments; ++t) {
        const unsigned kind = is_new ? new_masks[t] : old_masks[t];
        if (t == s || kind == 0) continue;
        const int first = t * kSegmentSize;
        const int before = rank_in_sorted(dists + first, ids + first, min(kSegmentSize, k - first), dists[i],
                                          ids[i], false);
        rank += __popc(kind & low_bits(before));
      }
      if (rank < (is_new ? samples : old_limit)) {
        if (is_new) {
          new_samples[node * stride + rank] = entry_id(entry);
          lists.ids[base + i] = entry_id(entry);  // sampled: OLD from now on
        } else {
          old_samples[node * stride + rank] = entry_id(entry);
        }
      }
    }
    new_count += __popc(new_masks[s]);
    old_count += __popc(old_masks[s]);
  }
  if (lane == 0) {
    forward_new[node] = total_new[node] = min(new_count, samples);
    forward_old[node] = total_old[node] = min(old_count, old_limit);
  }
}

// A thread per forward sample: appends the node to the sample's own list.
__global__ void add_reverse_samples_kernel(int64_t nodes, int samples, uint32_t* sample_lists,
                                           const int* forward, int* total) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t node = index / samples;
  const int slot = static_cast<int>(index % samples);
  if (node >= nodes || slot >= forward[node]) return;
  const int stride = 2 * samples;
  const uint32_t target = sample_lists[node * stride + slot];
  const int position = atomicAdd(total + target, 1);
  if (position < stride) sample_lists[static_cast<int64_t>(target) * stride + position] = node;
}

// A warp per sample list: keeps the first occurrence of every id, in order.
__global__ void dedupe_samples_kernel(int64_t nodes, int samples, uint32_t* sample_lists,
                                      int* total) {
  const int64_t node = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (node >= nodes) return;
  const int stride = 2 * samples;
  uint32_t* list = sample_lists + node * stride;
  const int count = min(total[node], stride);
  uint32_t values[kMaxSamplesPerList / kWarpSize];
  bool keep[kMaxSamplesPerList / kWarpSize];
#pragma unroll
  for (int r = 0; r < kMaxSamplesPerList / kWarpSize; ++r) {
    const int i = r * kWarpSize + lane_id();
    values[r] = i < count ? list[i] : kInvalidId;
    keep[r] = i < count;
    for (int j = 0; j < i && keep[r]; ++j) keep[r] = list[j] != values[r];
  }
  __syncwarp();
  const int kept = warp_compact(list, values, keep);
  if (lane_id() == 0) total[node] = kept;
}

__device__ __forceinline__ bool same_side(uint32_t a, uint32_t b, int64_t split) {
  return split >= 0 && ((static_cast<int64_t>(a) < split) == (static_cast<int64_t>(b) < split));
}

// A block's shared memory for up to kCapacity (2p) NEW and OLD samples:
// sized to p, so that more blocks share an SM.
template <int kCapacity>
struct CrossMatchShared {
  static constexpr int kTasks = 3 * kCapacity;  // 2 per NEW sample, 1 per OLD sample
  uint32_t new_ids[kCapacity];
  uint32_t old_ids[kCapacity];
  float new_rows[kCapacity][kDimTile + 1];
  float old_rows[kCapacity][kDimTile + 1];
  float new_new[kCapacity * (kCapacity - 1) / 2];  // at u(u-1)/2 + v, u > v
  float new_old[kCapacity * kCapacity];            // at u * kCapacity + o
  uint32_t task_owner[kTasks];
  uint32_t task_candidate[kTasks];
  float task_dist[kTasks];
  int passing[kTasks];
  int passing_count;
  int new_sides;  // bit 0: a NEW sample below split, bit 1: one at or past it
  int old_count;
  unsigned int updates;
};

// One thread's share of a tile of kDimTile dimensions of a block's NEW and
// OLD rows, four values at a time, held in registers between the gather
// from the rows and the store into shared memory.
template <int kCapacity, int kCrossThreads>
struct RowTileStage {
  static constexpr int kQuads = kDimTile / 4;
  static constexpr int kPerThread = (2 * kCapacity * kQuads + kCrossThreads - 1) / kCrossThreads;
  float4 values[kPerThread];

  __device__ void gather(const uint32_t* new_ids, const uint32_t* old_ids, int new_count, int old_count,
                         const float* data, int dim, int d0) {
    const bool whole_quads = dim % 4 == 0;  // then every quad is 16-byte aligned
#pragma unroll
    for (int s = 0; s < kPerThread; ++s) {
      const int idx = static_cast<int>(threadIdx.x) + s * kCrossThreads;
      const int r = idx / kQuads;
      const int c = d0 + (idx % kQuads) * 4;
      float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < new_count + old_count && c < dim) {
        const uint32_t id = r < new_count ? new_ids[r] : old_ids[r - new_count];
        const float* row = data + static_cast<int64_t>(id) * dim;
        if (whole_quads) {
          v = __ldg(reinterpret_cast<const float4*>(row + c));
        } else {
          v.x = __ldg(row + c);
          v.y = c + 1 < dim ? __ldg(row + c + 1) : 0.0f;
          v.z = c + 2 < dim ? __ldg(row + c + 2) : 0.0f;
          v.w = c + 3 < dim ? __ldg(row + c + 3) : 0.0f;
        }
      }
      values[s] = v;
    }
  }

  __device__ void store(float (*new_rows)[kDimTile + 1], float (*old_rows)[kDimTile + 1], int new_count,
                        int old_count) const {
#pragma unroll
    for (int s = 0; s < kPerThread; ++s) {
      const int idx = static_cast<int>(threadIdx.x) + s * kCrossThreads;
      const int r = idx / kQuads;
      if (r >= new_count + old_count) continue;
      float* out = r < new_count ? new_rows[r] : old_rows[r - new_count];
      const int c = (idx % kQuads) * 4;
      out[c] = values[s].x;
      out[c + 1] = values[s].y;
      out[c + 2] = values[s].z;
      out[c + 3] = values[s].w;
    }
  }
};

// In a merge (split >= 0) only pairs across split are matched. When every
// NEW sample lies on one side, as GGM's lists make them (a list only gains
// nodes of the other side, flagged NEW, and starts with its own side's
// entries OLD), no NEW-NEW pair is across and the OLD samples on that same
// side meet no NEW one: the block then keeps only the OLD samples of the
// other side and skips the NEW-NEW pairs. Returns whether it skips them;
// shared.old_count is the OLD samples kept. Block-wide.
template <int kCapacity>
__device__ bool keep_only_pairs_across(CrossMatchShared<kCapacity>& shared, int new_count, int old_count,
                                       int64_t split) {
  const int tid = threadIdx.x;
  if (tid == 0) {
    shared.new_sides = 0;
    shared.old_count = old_count;
  }
  __syncthreads();
  if (split < 0) return false;
  if (tid < new_count) atomicOr(&shared.new_sides, static_cast<int64_t>(shared.new_ids[tid]) < split ? 1 : 2);
  __syncthreads();
  const int new_sides = shared.new_sides;
  if (new_sides == 3) return false;
  if (tid < kWarpSize) {
    const bool new_below = new_sides == 1;
    uint32_t ids[kCapacity / kWarpSize];
    bool keep[kCapacity / kWarpSize];
#pragma unroll
    for (int r = 0; r < kCapacity / kWarpSize; ++r) {
      const int i = r * kWarpSize + tid;
      ids[r] = i < old_count ? shared.old_ids[i] : kInvalidId;
      keep[r] = i < old_count && (static_cast<int64_t>(ids[r]) < split) != new_below;
    }
    __syncwarp();
    const int kept = warp_compact(shared.old_ids, ids, keep);
    if (tid == 0) shared.old_count = kept;
  }
  __syncthreads();
  return true;
}

// A block per node: the cross-matching of its NEW and OLD samples and the
// selective update of the lists of those samples. Partial distances are
// accumulated in shared memory, one slot per thread, so that few registers
// are live and several blocks share an SM.
// The blocks an SM is to hold, which bounds the registers a thread may
// take: a block of kMaxSamplesPerList samples needs about 44 KB of shared
// memory, so no more than five of them share an SM whatever their registers.
template <int kCapacity, int kCrossThreads>
constexpr int cross_match_min_blocks() {
  if (kCrossThreads == kBuildCrossThreads) return 4;
  return kCapacity == kMaxSamplesPerList ? 5 : 8;
}

template <Metric M, int kCapacity, int kCrossThreads>
__global__ void __launch_bounds__(kCrossThreads, (cross_match_min_blocks<kCapacity, kCrossThreads>()))
    cross_match_kernel(KnnListsView lists, int64_t nodes, const float* data, int dim, int samples,
                       const uint32_t* new_samples, const uint32_t* old_samples,
                       const int* total_new, const int* total_old, int64_t split,
                       unsigned long long* updates) {
  __shared__ CrossMatchShared<kCapacity> shared;
  const int64_t node = blockIdx.x;
  if (node >= nodes) return;
  const int stride = 2 * samples;
  const int new_count = min(total_new[node], stride);
  const int sampled_old = min(total_old[node], stride);
  if (new_count == 0) return;
  const int tid = threadIdx.x;
  if (tid < new_count) shared.new_ids[tid] = new_samples[node * stride + tid];
  if (tid < sampled_old) shared.old_ids[tid] = old_samples[node * stride + tid];
  if (tid == 0) {
    shared.updates = 0;
    shared.passing_count = 0;
  }
  const bool across_only = keep_only_pairs_across(shared, new_count, sampled_old, split);
  const int old_count = shared.old_count;
  if (across_only && old_count == 0) return;  // no pair across
  const int pair_count = across_only ? 0 : new_count * (new_count - 1) / 2;
  for (int t = tid; t < pair_count; t += kCrossThreads) shared.new_new[t] = 0.0f;
  for (int t = tid; t < new_count * kCapacity; t += kCrossThreads) shared.new_old[t] = 0.0f;
  __syncthreads();

  const int new_half = (new_count + 1) / 2;
  const int old_half = (old_count + 1) / 2;
  // The kernel waits on its rows' gathers: each thread reads its share of
  // the next tile into registers while the block scores this one.
  RowTileStage<kCapacity, kCrossThreads> stage;
  stage.gather(shared.new_ids, shared.old_ids, new_count, old_count, data, dim, 0);
  for (int d0 = 0; d0 < dim; d0 += kDimTile) {
    stage.store(shared.new_rows, shared.old_rows, new_count, old_count);
    __syncthreads();
    if (d0 + kDimTile < dim) {
      stage.gather(shared.new_ids, shared.old_ids, new_count, old_count, data, dim, d0 + kDimTile);
    }
    // NEW-NEW: thread t takes pair t by the triangular mapping.
    for (int t = tid; t < pair_count; t += kCrossThreads) {
      int u;
      int v;
      triangle_pair(t, u, v);
      float sum = 0.0f;
#pragma unroll 8
      for (int c = 0; c < kDimTile; ++c) {
        sum += distance_term<M>(shared.new_rows[u][c], shared.new_rows[v][c]);
      }
      shared.new_new[t] += sum;
    }
    // NEW-OLD: each thread owns 2 x 2 entries, NEW u and u + new_half
    // against OLD o and o + old_half, so that only the pairs there are take
    // threads, and a warp's threads read distinct OLD rows (conflict-free:
    // rows are 33 floats apart).
    for (int t = tid; t < new_half * old_half; t += kCrossThreads) {
      const int u = t / old_half;
      const int o = t % old_half;
      float sum[2][2] = {};
#pragma unroll 8
      for (int c = 0; c < kDimTile; ++c) {
        const float n0 = shared.new_rows[u][c];
        const float n1 = shared.new_rows[u + new_half][c];
        const float o0 = shared.old_rows[o][c];
        const float o1 = shared.old_rows[o + old_half][c];
        sum[0][0] += distance_term<M>(n0, o0);
        sum[0][1] += distance_term<M>(n0, o1);
        sum[1][0] += distance_term<M>(n1, o0);
        sum[1][1] += distance_term<M>(n1, o1);
      }
#pragma unroll
      for (int a = 0; a < 2; ++a) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const int nu = u + a * new_half;
          const int no = o + b * old_half;
          if (nu < new_count && no < old_count) shared.new_old[nu * kCapacity + no] += sum[a][b];
        }
      }
    }
    __syncthreads();
  }

  for (int t = tid; t < pair_count; t += kCrossThreads) {
    int u;
    int v;
    triangle_pair(t, u, v);
    const uint32_t a = shared.new_ids[u];
    const uint32_t b = shared.new_ids[v];
    shared.new_new[t] = (a == b || same_side(a, b, split)) ? INFINITY : finish_distance<M>(shared.new_new[t]);
  }
  for (int t = tid; t < new_count * kCapacity; t += kCrossThreads) {
    const int u = t / kCapacity;
    const int o = t % kCapacity;
    if (o >= old_count) continue;
    const uint32_t x = shared.new_ids[u];
    const uint32_t y = shared.old_ids[o];
    shared.new_old[t] = (x == y || same_side(x, y, split)) ? INFINITY : finish_distance<M>(shared.new_old[t]);
  }
  __syncthreads();

  // Selective update: per NEW sample its nearest other NEW and its nearest
  // OLD; per OLD sample its nearest NEW; each found by a warp arg-min.
  const int warp = tid / kWarpSize;
  const int lane = lane_id();
  const int tasks = 2 * new_count + old_count;
  const int first_task = across_only ? new_count : 0;  // the NEW-NEW tasks
  for (int task = first_task + warp; task < tasks; task += kCrossThreads / kWarpSize) {
    uint32_t owner;
    int candidates;
    if (task < new_count) {
      owner = shared.new_ids[task];
      candidates = new_count;
    } else if (task < 2 * new_count) {
      owner = shared.new_ids[task - new_count];
      candidates = old_count;
    } else {
      owner = shared.old_ids[task - 2 * new_count];
      candidates = new_count;
    }
    float best = INFINITY;
    uint32_t best_id = kInvalidId;
    for (int j = lane; j < candidates; j += kWarpSize) {
      float d;
      uint32_t id;
      if (task < new_count) {
        if (j == task) continue;
        d = shared.new_new[triangle_index(task, j)];
        id = shared.new_ids[j];
      } else if (task < 2 * new_count) {
        d = shared.new_old[(task - new_count) * kCapacity + j];
        id = shared.old_ids[j];
      } else {
        d = shared.new_old[j * kCapacity + (task - 2 * new_count)];
        id = shared.new_ids[j];
      }
      if (pair_less(d, id, best, best_id)) {
        best = d;
        best_id = id;
      }
    }
    warp_arg_min(best, best_id);
    if (lane == 0) {
      shared.task_owner[task] = owner;
      shared.task_candidate[task] = best < INFINITY ? best_id : kInvalidId;
      shared.task_dist[task] = best;
    }
  }
  __syncthreads();
  // The unlocked look at each target segment's worst entry, all tasks at
  // once, so that only the pairs that can enter a list queue for a lock.
  for (int task = first_task + tid; task < tasks; task += kCrossThreads) {
    const uint32_t candidate = shared.task_candidate[task];
    if (candidate == kInvalidId) continue;
    const int segment = static_cast<int>(candidate % static_cast<uint32_t>(lists.segments));
    const int first = segment * kSegmentSize;
    const int length = min(kSegmentSize, lists.k - first);
    const int64_t worst_at = static_cast<int64_t>(shared.task_owner[task]) * lists.k + first + length - 1;
    if (shared.task_dist[task] < __ldcg(lists.dists + worst_at)) {
      shared.passing[atomicAdd(&shared.passing_count, 1)] = task;
    }
  }
  __syncthreads();
  for (int i = warp; i < shared.passing_count; i += kCrossThreads / kWarpSize) {
    const int task = shared.passing[i];
    if (warp_insert_candidate(lists, shared.task_owner[task], shared.task_candidate[task],
                              shared.task_dist[task], true) &&
        lane == 0) {
      atomicAdd(&shared.updates, 1u);
    }
  }
  __syncthreads();
  if (tid == 0 && shared.updates > 0) atomicAdd(updates, static_cast<unsigned long long>(shared.updates));
}

// A warp per list: sorts the k entries (the segments merged) by (distance, id)
// and clears the flags.
__global__ void sort_lists_kernel(uint32_t* ids, float* dists, int64_t nodes, int k) {
  extern __shared__ unsigned char shared_raw[];
  const int warp_in_block = threadIdx.x / kWarpSize;
  const int64_t node = static_cast<int64_t>(blockIdx.x) * kListWarpsPerBlock + warp_in_block;
  if (node >= nodes) return;
  float* local_dists = reinterpret_cast<float*>(shared_raw) + static_cast<size_t>(warp_in_block) * 2 * k;
  uint32_t* local_ids = reinterpret_cast<uint32_t*>(local_dists + k);
  const int64_t base = node * k;
  for (int i = lane_id(); i < k; i += kWarpSize) {
    local_dists[i] = dists[base + i];
    local_ids[i] = entry_id(ids[base + i]);
  }
  __syncwarp();
  for (int i = lane_id(); i < k; i += kWarpSize) {
    const float d = local_dists[i];
    const uint32_t id = local_ids[i];
    int rank = 0;
    for (int j = 0; j < k; ++j) {
      // Empty slots (inf, kInvalidId) tie: order them by position.
      if (pair_less(local_dists[j], local_ids[j], d, id) ||
          (local_dists[j] == d && local_ids[j] == id && j < i)) {
        ++rank;
      }
    }
    dists[base + rank] = d;
    ids[base + rank] = id;
  }
}

unsigned grid_for(int64_t items, int per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace

GnndWorkspace::GnndWorkspace(int64_t node_count, int list_length, int sample_count)
    : nodes(node_count), k(list_length), samples(sample_count) {
  const size_t n = static_cast<size_t>(node_count);
  ids.allocate(n * k);
  dists.allocate(n * k);
  locks.allocate(n * segment_count(k));
  new_samples.allocate(n * 2 * samples);
  old_samples.allocate(n * 2 * samples);
  forward_new.allocate(n);
  forward_old.allocate(n);
  total_new.allocate(n);
  total_old.allocate(n);
  updates.allocate(1);
}

size_t GnndWorkspace::bytes_needed(int64_t node_count, int list_length, int sample_count) {
  const size_t n = static_cast<size_t>(node_count);
  return n * list_length * 8 + n * segment_count(list_length) * 4 + n * 4 * sample_count * 4 +
         n * 16 + 8;
}

KnnListsView GnndWorkspace::view() {
  return KnnListsView{ids.data(), dists.data(), locks.data(), k, segment_count(k)};
}

void GnndWorkspace::clear(cudaStream_t stream) {
  clear_lists_kernel<<<1024, 256, 0, stream>>>(ids.data(), dists.data(), nodes * k, locks.data(),
                                               nodes * segment_count(k));
  check_launch("clear_lists_kernel");
}

int checked_sample_count(const GnndParams& params) {
  if (params.k < 1 || params.k > kMaxGnndK) {
    throw Error(Status::InvalidArgument, "GPU GNND supports 1 <= k <= " + std::to_string(kMaxGnndK));
  }
  if (params.samples < 1) throw Error(Status::InvalidArgument, "GNND needs at least one sample");
  return std::min(params.samples, kMaxSamplesPerList / 2);
}

void fill_random_lists(GnndWorkspace& ws, const float* data, int dim, Metric metric, uint64_t seed,
                       cudaStream_t stream) {
  dispatch_metric(metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    fill_random_lists_kernel<M><<<grid_for(ws.nodes * kWarpSize, 256), 256, 0, stream>>>(
        ws.view(), ws.nodes, data, dim, seed);
    check_launch("fill_random_lists_kernel");
  });
}

void sample_lists(GnndWorkspace& ws, int64_t capped_end, int capped_old, cudaStream_t stream) {
  const size_t list_shared = static_cast<size_t>(kListWarpsPerBlock) * 2 * ws.k * sizeof(float);
  sample_lists_kernel<<<grid_for(ws.nodes, kListWarpsPerBlock), kListWarpsPerBlock * kWarpSize, list_shared,
                        stream>>>(ws.view(), ws.nodes, ws.samples, capped_end, capped_old, ws.new_samples.data(),
                                  ws.old_samples.data(), ws.forward_new.data(), ws.forward_old.data(),
                                  ws.total_new.data(), ws.total_old.data());
  check_launch("sample_lists_kernel");
}

int run_gnnd_iterations(DeviceContext& ctx, GnndWorkspace& ws, const float* data, int dim,
                        Metric metric, const GnndParams& params, int64_t split,
                        const RunControl& control, int first_side_old_samples) {
  cudaStream_t stream = ctx.stream.get();
  const int p = ws.samples;
  const double stop_below = params.min_update_rate * static_cast<double>(ws.nodes) * ws.k;
  control.set_total(params.iterations);
  PhaseTrace trace(split >= 0 ? "ggm " : "gnnd", stream);
  const int64_t capped_end = split >= 0 && first_side_old_samples > 0 ? split : 0;
  int iteration = 0;
  while (iteration < params.iterations) {
    control.throw_if_cancelled();
    sample_lists(ws, capped_end, std::min(p, first_side_old_samples), stream);
    trace.mark("sample");
    add_reverse_samples_kernel<<<grid_for(ws.nodes * p, 256), 256, 0, stream>>>(
        ws.nodes, p, ws.new_samples.data(), ws.forward_new.data(), ws.total_new.data());
    check_launch("add_reverse_samples_kernel(new)");
    add_reverse_samples_kernel<<<grid_for(ws.nodes * p, 256), 256, 0, stream>>>(
        ws.nodes, p, ws.old_samples.data(), ws.forward_old.data(), ws.total_old.data());
    check_launch("add_reverse_samples_kernel(old)");
    dedupe_samples_kernel<<<grid_for(ws.nodes * kWarpSize, 256), 256, 0, stream>>>(
        ws.nodes, p, ws.new_samples.data(), ws.total_new.data());
    check_launch("dedupe_samples_kernel(new)");
    dedupe_samples_kernel<<<grid_for(ws.nodes * kWarpSize, 256), 256, 0, stream>>>(
        ws.nodes, p, ws.old_samples.data(), ws.total_old.data());
    check_launch("dedupe_samples_kernel(old)");
    trace.mark("reverse + dedupe");
    TSDG_CUDA_CHECK(cudaMemsetAsync(ws.updates.data(), 0, sizeof(unsigned long long), stream));
    dispatch_metric(metric, [&](auto tag) {
      constexpr Metric M = decltype(tag)::value;
      const auto launch = [&](auto kernel, int threads) {
        kernel<<<static_cast<unsigned>(ws.nodes), threads, 0, stream>>>(
            ws.view(), ws.nodes, data, dim, p, ws.new_samples.data(), ws.old_samples.data(),
            ws.total_new.data(), ws.total_old.data(), split, ws.updates.data());
      };
      if (2 * p <= kMaxSamplesPerList / 2) {
        launch(cross_match_kernel<M, kMaxSamplesPerList / 2, kMergeCrossThreads>, kMergeCrossThreads);
      } else if (split >= 0) {
        launch(cross_match_kernel<M, kMaxSamplesPerList, kMergeCrossThreads>, kMergeCrossThreads);
      } else {
        launch(cross_match_kernel<M, kMaxSamplesPerList, kBuildCrossThreads>, kBuildCrossThreads);
      }
      check_launch("cross_match_kernel");
    });
    unsigned long long updates = 0;
    copy_to_host(&updates, ws.updates.data(), 1, stream);
    ctx.stream.synchronize();
    trace.mark("cross-match + update", static_cast<long long>(updates));
    control.add_done(1);
    ++iteration;
    if (static_cast<double>(updates) < stop_below) break;
  }
  return iteration;
}

void sort_lists(GnndWorkspace& ws, cudaStream_t stream) {
  const size_t list_shared = static_cast<size_t>(kListWarpsPerBlock) * 2 * ws.k * sizeof(float);
  sort_lists_kernel<<<grid_for(ws.nodes, kListWarpsPerBlock), kListWarpsPerBlock * kWarpSize,
                      list_shared, stream>>>(ws.ids.data(), ws.dists.data(), ws.nodes, ws.k);
  check_launch("sort_lists_kernel");
}

KnnGraph download_sorted_lists(DeviceContext& ctx, GnndWorkspace& ws) {
  cudaStream_t stream = ctx.stream.get();
  sort_lists(ws, stream);
  KnnGraph graph(ws.nodes, ws.k, KnnGraph::Unfilled{});  // the copies write it whole
  copy_to_host(graph.ids.data(), ws.ids.data(), graph.ids.size(), stream);
  copy_to_host(graph.dists.data(), ws.dists.data(), graph.dists.size(), stream);
  ctx.stream.synchronize();
  return graph;
}

KnnGraph exact_graph_by_bruteforce(DeviceContext& ctx, MatrixView data, Metric metric, int k,
                                   const RunControl& control) {
  const int wide = k + 1;
  std::vector<uint32_t> ids(static_cast<size_t>(data.rows) * wide);
  std::vector<float> dists(ids.size());
  exact_knn(ctx, data, data, metric, wide, ids.data(), dists.data(), control);
  KnnGraph graph(data.rows, k);
  for (int64_t row = 0; row < data.rows; ++row) {
    int out = 0;
    for (int j = 0; j < wide && out < k; ++j) {
      const uint32_t id = ids[row * wide + j];
      if (id == static_cast<uint32_t>(row) || id == kInvalidId) continue;
      graph.ids[row * k + out] = id;
      graph.dists[row * k + out] = dists[row * wide + j];
      ++out;
    }
  }
  return graph;
}

KnnGraph gnnd_build_resident(DeviceContext& ctx, MatrixView data, Metric metric,
                             const GnndParams& params, const RunControl& control) {
  const int p = checked_sample_count(params);
  cudaStream_t stream = ctx.stream.get();
  PhaseTrace trace("gnnd", stream);
  DeviceMatrix rows = DeviceMatrix::upload(data, stream);
  GnndWorkspace ws(data.rows, params.k, p);
  ws.clear(stream);
  trace.mark("upload + allocate");
  fill_random_lists(ws, rows.values.data(), data.dim, metric, params.seed, stream);
  trace.mark("random lists");
  run_gnnd_iterations(ctx, ws, rows.values.data(), data.dim, metric, params, -1, control);
  KnnGraph graph = download_sorted_lists(ctx, ws);
  trace.mark("iterations, sort + download");
  return graph;
}

KnnGraph gnnd_build(DeviceContext& ctx, MatrixView data, Metric metric, const GnndParams& params,
                    const RunControl& control) {
  const int p = checked_sample_count(params);
  if (data.rows >= static_cast<int64_t>(kIdMask)) {
    throw Error(Status::InvalidArgument, "too many rows for 31-bit ids");
  }
  // Sampling needs lists much shorter than the set.
  if (data.rows <= 4 * static_cast<int64_t>(params.k)) {
    return exact_graph_by_bruteforce(ctx, data, metric, params.k, control);
  }
  const size_t per_row = static_cast<size_t>(data.dim) * sizeof(float) +
                         GnndWorkspace::bytes_needed(1, params.k, p);
  const size_t usable = usable_device_memory();
  if (per_row * static_cast<size_t>(data.rows) <= usable) {
    return gnnd_build_resident(ctx, data, metric, params, control);
  }
  // Too large for one pass: shards of which two (and GGM's copy of their
  // lists) fit at a time.
  const int64_t shard_rows = static_cast<int64_t>(usable / (2 * (per_row + params.k * 8)) * 9 / 10);
  if (shard_rows <= 4 * static_cast<int64_t>(params.k)) {
    throw Error(Status::OutOfMemory, "GNND of this set: " + std::to_string(usable >> 20) +
                                         " MiB of GPU memory is too little even for shards");
  }
  return gnnd_build_by_shards(ctx, data, metric, params, shard_rows, control);
}

}  // namespace tsdg::cuda
