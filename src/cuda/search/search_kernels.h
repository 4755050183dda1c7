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
  // Non-null: each query starts from its own entry_pick_count best entries,
  // indexes into entries (rows * entry_pick_count, kInvalidId: none) picked
  // by an exact search of the entry rows, instead of scoring every entry.
  const uint32_t* entry_picks = nullptr;
  int entry_pick_count = 0;
  // Non-null: each query starts from its own query_entry_count nodes (rows *
  // query_entry_count node ids, kInvalidId: none) at the distances
  // query_entry_dists gives, the walk of the navigating layer
  // (navigating_layer.h), instead of from the navigating entry set; the
  // walk has scored them already.
  const uint32_t* query_entry_ids = nullptr;
  const float* query_entry_dists = nullptr;
  int query_entry_count = 0;
};

// The i-th entry query_index starts from (i below entry_total).
__device__ __forceinline__ uint32_t query_entry(const SearchLaunch& launch, int64_t query_index, int i) {
  if (launch.query_entry_ids != nullptr) return launch.query_entry_ids[query_index * launch.query_entry_count + i];
  if (launch.entry_picks == nullptr) return launch.entries[i];
  const uint32_t pick = launch.entry_picks[query_index * launch.entry_pick_count + i];
  return pick == kInvalidId ? kInvalidId : launch.entries[pick];
}

__device__ __forceinline__ int entry_total(const SearchLaunch& launch) {
  if (launch.query_entry_ids != nullptr) return launch.query_entry_count;
  return launch.entry_picks == nullptr ? launch.entry_count : launch.entry_pick_count;
}

// Whether the entries come with their distances (query_entry_distance), so
// that the kernels need not score them.
__device__ __forceinline__ bool entries_scored(const SearchLaunch& launch) {
  return launch.query_entry_dists != nullptr;
}

// The distance of the i-th entry query_index starts from, where entries_scored.
__device__ __forceinline__ float query_entry_distance(const SearchLaunch& launch, int64_t query_index, int i) {
  return launch.query_entry_dists[query_index * launch.query_entry_count + i];
}

// The exact rerank of the walks' candidates (exact_rerank.cu).
struct RerankLaunch {
  const float* rows;     // device, nodes * dim, the float rows
  int dim;
  const float* queries;  // device, query_count * dim
  int64_t query_count;
  const uint32_t* walk_ids;  // device, query_count * walk_k, a walk's sorted results
  int walk_k;
  int k;
  uint32_t* ids;  // device, query_count * k
  float* dists;   // device, query_count * k
};

// How many of a walk's best candidates are scored again for k results at
// ef: twice k (whole warps of them), within the ef a walk keeps; the half
// distances misorder only near-ties, so the true k best lie among them.
int rerank_candidate_count(int k, int ef);

void launch_exact_rerank(const RerankLaunch& launch, Metric metric, cudaStream_t stream);

// One warp-sized block per query, started from the navigating entry set (or
// its own entries):
// segmented sorted expansion queue, segmented visited table, sorted top-ef list.
void launch_large_batch_search(const SearchLaunch& launch, cudaStream_t stream);

// One block per query: a beam search over a pool of the ef best nodes that
// expands `width` nodes a step (0: the default width). Needs k <= ef <=
// kGpuSmallBatchMaxEf (params.h); larger ef goes to the large-batch kernel.
void launch_small_batch_search(const SearchLaunch& launch, int width, cudaStream_t stream);

}  // namespace tsdg::cuda
