// What both GPU searches share: the resident graph, the query in shared
// memory, distances computed by teams of lanes, and the
// stop rule (Wang, Wang, Zhao, 2022 Alg. 2 line 11 with GGNN's slack, Groh et al., 2023 4.1.2),
// the same rule as the CPU search's SlackRule.
//
// The walks read the rows in half precision: a walk's time goes to reading
// rows, and its distances only steer it. Its best candidates are scored
// again on the float rows (exact_rerank.cu) before they are returned.
#pragma once

#include <cstdint>

#include "distance.cuh"
#include "half_rows.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {

struct DeviceGraph {
  HalfRows rows;
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

// Sorts the count candidates (shared, one warp) and merges them into the
// sorted best list of length ef through the spare buffer, which it swaps in.
__device__ __forceinline__ void merge_into_best(float*& best_dists, uint32_t*& best_ids,
                                                float*& spare_dists, uint32_t*& spare_ids, int ef,
                                                float* cand_dists, uint32_t* cand_ids, int count) {
  const int lane = lane_id();
  float d = lane < count ? cand_dists[lane] : INFINITY;
  uint32_t id = lane < count ? cand_ids[lane] : kInvalidId;
  warp_bitonic_sort(d, id);
  cand_dists[lane] = d;
  cand_ids[lane] = id;
  __syncwarp();
  warp_merge_sorted(best_dists, best_ids, ef, cand_dists, cand_ids, count, spare_dists, spare_ids);
  float* swap_dists = best_dists;
  uint32_t* swap_ids = best_ids;
  best_dists = spare_dists;
  best_ids = spare_ids;
  spare_dists = swap_dists;
  spare_ids = swap_ids;
}

// Copies one query row into shared memory, zero up to padded (block-wide).
__device__ __forceinline__ void load_query(const float* query, int dim, int padded, float* shared_query) {
  for (int i = threadIdx.x; i < padded; i += blockDim.x) shared_query[i] = i < dim ? query[i] : 0.0f;
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

// The same for a half row (HalfRows) against the shared query, zero-padded
// to rows.stride.
template <Metric M, int kTeam>
__device__ __forceinline__ float team_half_distance(const float* query, const __half* row, const HalfRows& rows) {
  const int member = lane_id() % kTeam;
  float sum = 0.0f;
  if (row != nullptr) {
    const uint4* r8 = reinterpret_cast<const uint4*>(row);
    const float4* q4 = reinterpret_cast<const float4*>(query);
    for (int i = member; i < rows.stride / 8; i += kTeam) {
      const uint4 packed = __ldg(r8 + i);
      const __half2* h = reinterpret_cast<const __half2*>(&packed);
      const float4 qa = q4[2 * i];
      const float4 qb = q4[2 * i + 1];
      const float2 v0 = __half22float2(h[0]);
      const float2 v1 = __half22float2(h[1]);
      const float2 v2 = __half22float2(h[2]);
      const float2 v3 = __half22float2(h[3]);
      const float u = rows.unscale;
      sum += distance_term<M>(qa.x, v0.x * u) + distance_term<M>(qa.y, v0.y * u) +
             distance_term<M>(qa.z, v1.x * u) + distance_term<M>(qa.w, v1.y * u) +
             distance_term<M>(qb.x, v2.x * u) + distance_term<M>(qb.y, v2.y * u) +
             distance_term<M>(qb.z, v3.x * u) + distance_term<M>(qb.w, v3.y * u);
    }
  }
#pragma unroll
  for (int offset = kTeam / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFullMask, sum, offset);
  return finish_distance<M>(sum);
}

// The half row of node id, or nullptr for kInvalidId.
__device__ __forceinline__ const __half* half_row(const HalfRows& rows, uint32_t id) {
  return id == kInvalidId ? nullptr : rows.values + static_cast<int64_t>(id) * rows.stride;
}

}  // namespace tsdg::cuda
