// The layout of the k-NN lists GNND and GGM refine on the device
// (knn_lists.cuh, which inserts into them): segments of a warp's 32 entries,
// the NEW flag in an id's top bit. Apart from the device functions, so that
// host code (the workspace, its tests) sees it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tsdg::cuda {

constexpr uint32_t kNewFlag = 0x80000000u;
constexpr uint32_t kIdMask = 0x7fffffffu;
constexpr int kSegmentSize = 32;

__host__ __device__ inline int segment_count(int k) { return (k + kSegmentSize - 1) / kSegmentSize; }

struct KnnListsView {
  uint32_t* ids;   // nodes * k, flagged
  float* dists;    // nodes * k
  int* locks;      // nodes * segment_count(k)
  int k;
  int segments;
};

}  // namespace tsdg::cuda
