// Warp-level building blocks shared by the kernels: (distance, id) pairs in a
// strict order, the 32-wide bitonic sort in registers, the arg-min by shuffles,
// and the merge of a sorted batch into a sorted list held in shared memory.
#pragma once

#include <cstdint>

#include "types.h"

namespace tsdg::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Ties on distance are broken by id, so every ordering below is total.
__device__ __forceinline__ bool pair_less(float da, uint32_t ia, float db, uint32_t ib) {
  return da < db || (da == db && ia < ib);
}

__device__ __forceinline__ int lane_id() { return static_cast<int>(threadIdx.x & 31u); }

// Sorts the 32 pairs held one per lane, ascending by lane.
__device__ __forceinline__ void warp_bitonic_sort(float& dist, uint32_t& id) {
  const int lane = lane_id();
  for (int size = 2; size <= kWarpSize; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const float other_dist = __shfl_xor_sync(kFullMask, dist, stride);
      const uint32_t other_id = __shfl_xor_sync(kFullMask, id, stride);
      const bool ascending = (lane & size) == 0;
      const bool lower = (lane & stride) == 0;
      // The lower lane of a pair keeps the smaller value in an ascending run.
      const bool keep_smaller = (lower == ascending);
      const bool other_smaller = pair_less(other_dist, other_id, dist, id);
      if (other_smaller == keep_smaller) {
        dist = other_dist;
        id = other_id;
      }
    }
  }
}

// The smallest pair over the warp, returned to every lane.
__device__ __forceinline__ void warp_arg_min(float& dist, uint32_t& id) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_dist = __shfl_xor_sync(kFullMask, dist, offset);
    const uint32_t other_id = __shfl_xor_sync(kFullMask, id, offset);
    if (pair_less(other_dist, other_id, dist, id)) {
      dist = other_dist;
      id = other_id;
    }
  }
}

__device__ __forceinline__ float warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}

// Number of entries of a sorted list (length n) strictly before (d, i); with
// or_equal, also the entries equal to it.
__device__ __forceinline__ int rank_in_sorted(const float* dists, const uint32_t* ids, int n,
                                              float d, uint32_t i, bool or_equal) {
  int low = 0;
  int high = n;
  while (low < high) {
    const int mid = (low + high) >> 1;
    const bool before = pair_less(dists[mid], ids[mid], d, i) ||
                        (or_equal && dists[mid] == d && ids[mid] == i);
    if (before) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

// out = the first `length` pairs of merge(list, batch), both sorted and in
// shared memory; list has `length` entries (padded with +inf), batch has
// batch_count. Called by all lanes of one warp; out must not alias the inputs.
__device__ __forceinline__ void warp_merge_sorted(const float* list_dists, const uint32_t* list_ids,
                                                  int length, const float* batch_dists,
                                                  const uint32_t* batch_ids, int batch_count,
                                                  float* out_dists, uint32_t* out_ids) {
  for (int i = lane_id(); i < length; i += kWarpSize) {
    const int pos =
        i + rank_in_sorted(batch_dists, batch_ids, batch_count, list_dists[i], list_ids[i], false);
    if (pos < length) {
      out_dists[pos] = list_dists[i];
      out_ids[pos] = list_ids[i];
    }
  }
  for (int j = lane_id(); j < batch_count; j += kWarpSize) {
    const int pos =
        j + rank_in_sorted(list_dists, list_ids, length, batch_dists[j], batch_ids[j], true);
    if (pos < length) {
      out_dists[pos] = batch_dists[j];
      out_ids[pos] = batch_ids[j];
    }
  }
  __syncwarp();
}

// A cheap stateless hash for the random choices of the kernels (reproducible
// for a seed, independent across (a, b)).
__device__ __forceinline__ uint64_t mix_hash(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xC2B2AE3D27D4EB4Full);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 32;
  return x;
}

}  // namespace tsdg::cuda
