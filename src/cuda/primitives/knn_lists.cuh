// The k-NN lists that GNND and GGM refine on the device (Wang et al., 2021, 4.3):
// each list is split in segments of 32 entries, each sorted by distance and
// guarded by its own spinlock, so a warp inserts into one segment while other
// warps insert into the others. A candidate v always goes to segment
// v % segments, so a duplicate can only sit in that segment. Entries carry the
// NEW flag in the top bit of the id.
#pragma once

#include <cstdint>

#include "distance.cuh"
#include "knn_lists_layout.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {

static_assert(kSegmentSize == kWarpSize, "a warp inserts into a segment, a lane an entry");

__device__ __forceinline__ bool entry_valid(uint32_t entry) { return entry != kInvalidId; }
__device__ __forceinline__ bool entry_new(uint32_t entry) {
  return entry != kInvalidId && (entry & kNewFlag) != 0;
}
__device__ __forceinline__ uint32_t entry_id(uint32_t entry) {
  return entry == kInvalidId ? kInvalidId : (entry & kIdMask);
}

// Inserts candidate at distance d into node's list unless it is already there
// or not closer than the segment's worst entry; all lanes of a warp call it
// with the same arguments. Returns true when the list changed.
__device__ inline bool warp_insert_candidate(const KnnListsView& lists, uint32_t node,
                                             uint32_t candidate, float d, bool mark_new) {
  const int lane = lane_id();
  const int segment = static_cast<int>(candidate % static_cast<uint32_t>(lists.segments));
  const int first = segment * kSegmentSize;
  const int length = min(kSegmentSize, lists.k - first);
  const int64_t base = static_cast<int64_t>(node) * lists.k + first;
  // Unlocked look at the segment's worst entry rejects most candidates.
  if (!(d < __ldcg(lists.dists + base + length - 1))) return false;

  int* lock = lists.locks + static_cast<int64_t>(node) * lists.segments + segment;
  if (lane == 0) {
    while (atomicCAS(lock, 0, 1) != 0) {
    }
    __threadfence();
  }
  __syncwarp();
  const bool in_segment = lane < length;
  const uint32_t entry = in_segment ? __ldcg(lists.ids + base + lane) : kInvalidId;
  const float entry_dist = in_segment ? __ldcg(lists.dists + base + lane) : INFINITY;
  const bool duplicate = __any_sync(kFullMask, in_segment && entry_id(entry) == candidate);
  const float worst = __shfl_sync(kFullMask, entry_dist, length - 1);
  const bool inserted = !duplicate && d < worst;
  if (inserted) {
    const unsigned before =
        __ballot_sync(kFullMask, in_segment && pair_less(entry_dist, entry_id(entry), d, candidate));
    const int position = __popc(before);
    const float previous_dist = __shfl_up_sync(kFullMask, entry_dist, 1);
    const uint32_t previous_entry = __shfl_up_sync(kFullMask, entry, 1);
    if (lane == position) {
      __stcg(lists.ids + base + lane, candidate | (mark_new ? kNewFlag : 0u));
      __stcg(lists.dists + base + lane, d);
    } else if (lane > position && in_segment) {
      __stcg(lists.ids + base + lane, previous_entry);
      __stcg(lists.dists + base + lane, previous_dist);
    }
    __threadfence();
  }
  __syncwarp();
  if (lane == 0) atomicExch(lock, 0);
  return inserted;
}

}  // namespace tsdg::cuda
