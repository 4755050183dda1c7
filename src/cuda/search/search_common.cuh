// What both GPU searches share: the resident graph, the query in shared
// memory, distances computed by teams of lanes, and the
// stop rule (Wang, Wang, Zhao, 2022 Alg. 2 line 11 with GGNN's slack, Groh et al., 2023 4.1.2),
// the same rule as the CPU search's SlackRule.
#pragma once

#include <cstdint>

#include "distance.cuh"
#include "warp_primitives.cuh"

namespace tsdg::cuda {

struct DeviceGraph {
  const float* data;
  const uint32_t* neighbors;  // nodes * degree
  const uint8_t* lambdas;     // nodes * degree
  int64_t nodes;
  int dim;
  int degree;
};

struct StopRule {
  float tau;        // 0: plain best-first stop
  int k;            // best_k is the k-th best found
  float nn1_bound;  // d_nn1+ of the graph
  bool squared;     // L2: the rule is applied to square roots
};

// True when a candidate at distance d can no longer improve the k best.
__device__ __forceinline__ bool slack_stops(const StopRule& rule, float d, float best_1,
                                            float best_k) {
  if (rule.tau <= 0.0f) return false;
  if (rule.squared) {
    const float slack = rule.tau * fminf(sqrtf(fmaxf(best_1, 0.0f)), sqrtf(fmaxf(rule.nn1_bound, 0.0f)));
    return sqrtf(fmaxf(d, 0.0f)) > sqrtf(fmaxf(best_k, 0.0f)) + slack;
  }
  return d > best_k + rule.tau * fminf(fabsf(best_1), rule.nn1_bound);
}

// Copies one query row into shared memory (block-wide).
__device__ __forceinline__ void load_query(const float* query, int dim, float* shared_query) {
  for (int i = threadIdx.x; i < dim; i += blockDim.x) shared_query[i] = query[i];
  __syncthreads();
}

// The distance between the shared query and row, computed by the kTeam
// lanes of a team (aligned groups of a warp); every lane of the team gets it.
// A lane with row == nullptr contributes nothing but still takes part.
template <Metric M, int kTeam>
__device__ __forceinline__ float team_distance(const float* query, const float* row, int dim) {
  const int member = lane_id() % kTeam;
  float sum = 0.0f;
  if (row != nullptr) {
    if ((dim & 3) == 0) {
      const float4* q4 = reinterpret_cast<const float4*>(query);
      const float4* r4 = reinterpret_cast<const float4*>(row);
      for (int i = member; i < dim / 4; i += kTeam) {
        const float4 a = q4[i];
        const float4 b = __ldg(r4 + i);
        sum += distance_term<M>(a.x, b.x) + distance_term<M>(a.y, b.y) +
               distance_term<M>(a.z, b.z) + distance_term<M>(a.w, b.w);
      }
    } else {
      for (int i = member; i < dim; i += kTeam) sum += distance_term<M>(query[i], __ldg(row + i));
    }
  }
#pragma unroll
  for (int offset = kTeam / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
  return finish_distance<M>(sum);
}

}  // namespace tsdg::cuda
