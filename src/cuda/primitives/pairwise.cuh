// All pairwise distances among up to kRows rows picked by id, computed by one
// block in shared memory over tiles of kDims dimensions, one thread per pair
// with the triangular mapping of Wang et al., 2021 (eq. 1-2): pair t is (u, v), u > v,
// stored at u(u-1)/2 + v.
#pragma once

#include <cstdint>

#include "distance.cuh"

namespace tsdg::cuda {

__device__ __forceinline__ void triangle_pair(int t, int& u, int& v) {
  u = static_cast<int>(ceilf(sqrtf(2.0f * t + 2.25f) - 0.5f));
  while (u * (u - 1) / 2 > t) --u;  // rounding guards
  while (u * (u + 1) / 2 <= t) ++u;
  v = t - u * (u - 1) / 2;
}

__device__ __forceinline__ int triangle_index(int a, int b) {
  return a > b ? a * (a - 1) / 2 + b : b * (b - 1) / 2 + a;
}

template <int kRows, int kDims>
struct TriangleScratch {
  float rows[kRows][kDims + 1];
  float pairs[kRows * (kRows - 1) / 2];
};

// Fills scratch.pairs for ids[0 .. count); ids lives in shared memory. Ends
// with a barrier, so the results are visible to the whole block.
template <Metric M, int kRows, int kDims>
__device__ void block_triangle_distances(const uint32_t* ids, int count, const float* data, int dim,
                                         TriangleScratch<kRows, kDims>& scratch) {
  const int pair_count = count * (count - 1) / 2;
  for (int t = threadIdx.x; t < pair_count; t += blockDim.x) scratch.pairs[t] = 0.0f;
  for (int d0 = 0; d0 < dim; d0 += kDims) {
    __syncthreads();  // the previous tile is consumed
    for (int idx = threadIdx.x; idx < count * kDims; idx += blockDim.x) {
      const int r = idx / kDims;
      const int c = idx % kDims;
      scratch.rows[r][c] = d0 + c < dim ? data[static_cast<int64_t>(ids[r]) * dim + d0 + c] : 0.0f;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < pair_count; t += blockDim.x) {
      int u;
      int v;
      triangle_pair(t, u, v);
      float sum = 0.0f;
#pragma unroll
      for (int c = 0; c < kDims; ++c) sum += distance_term<M>(scratch.rows[u][c], scratch.rows[v][c]);
      scratch.pairs[t] += sum;
    }
  }
  __syncthreads();
  for (int t = threadIdx.x; t < pair_count; t += blockDim.x) {
    scratch.pairs[t] = finish_distance<M>(scratch.pairs[t]);
  }
  __syncthreads();
}

}  // namespace tsdg::cuda
