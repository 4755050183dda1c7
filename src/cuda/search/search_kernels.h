// Launchers of the two GPU searches (Wang, Wang, Zhao, 2022, section 4), called by the
// search index with device pointers on its stream.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "search_common.cuh"
#include "params.h"
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
  StopRule stop;
  uint32_t* ids;  // device, rows * k
  float* dists;   // device, rows * k
  // >= 0: query q is the vector of row own_row_first + q, and its search
  // ends as soon as it scores that row (the unreached-row checks, L2 and
  // cosine: a row found at distance 0 stays among the best, so the rest of
  // the walk could not lose it)
  int64_t own_row_first = -1;
};

// One warp-sized block per query, started from the navigating entry set:
// segmented sorted expansion queue, segmented visited table, sorted top-ef list.
void launch_large_batch_search(const SearchLaunch& launch, cudaStream_t stream);

// One block per query: a beam search over a pool of the ef best nodes that
// expands `width` nodes a step (0: the default width). Needs k <= ef <=
// kGpuSmallBatchMaxEf (params.h); larger ef goes to the large-batch kernel.
void launch_small_batch_search(const SearchLaunch& launch, int width, cudaStream_t stream);

}  // namespace tsdg::cuda
