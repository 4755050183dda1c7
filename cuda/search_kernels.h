// Launchers of the two GPU searches (paper 003, section 4), called by the
// search index with device pointers on its stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "search_common.cuh"
#include "types.h"

namespace tsdg::cuda {

struct SearchLaunch {
  DeviceGraph graph;
  Metric metric;
  const float* queries;  // device, rows * graph.dim
  int64_t rows;
  int k;
  int ef;
  int lambda_limit;
  const uint32_t* entries;        // the navigating entry set (device)
  int entry_count;
  uint64_t seed;  // small batch: the random entry nodes
  StopRule stop;
  uint32_t* ids;  // device, rows * k
  float* dists;   // device, rows * k
};

// One warp-sized block per query, started from the navigating entry set:
// segmented sorted expansion queue, segmented visited table, sorted top-ef list.
void launch_large_batch_search(const SearchLaunch& launch, cudaStream_t stream);

// searches blocks of 32 warps per query, each a cheap greedy search keeping
// its top 32 and starting from a different one of the best entries, then one
// merge per query. partial_ids / partial_dists hold
// rows * searches * 32 entries.
void launch_small_batch_search(const SearchLaunch& launch, int searches, uint32_t* partial_ids,
                               float* partial_dists, cudaStream_t stream);

}  // namespace tsdg::cuda
