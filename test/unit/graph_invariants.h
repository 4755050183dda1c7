// The invariants every stored TSDG list keeps, whichever backend built it:
// no padding before an edge, no self edges or duplicates, ids in range, every
// lambda <= lambda0 and lambdas non-decreasing along the list; and the naive
// occlusion count the stored lambdas are checked against. Shared by the CPU
// unit tests and the GPU tests.
#pragma once

#include <gtest/gtest.h>

#include <set>

#include "distance.h"
#include "types.h"

namespace tsdg {
namespace testing {

inline void expect_list_invariants(const TsdgGraph& graph, int lambda0) {
  for (int64_t u = 0; u < graph.nodes; ++u) {
    const uint32_t* ids = graph.list(u);
    const uint8_t* lambdas = graph.list_lambdas(u);
    std::set<uint32_t> seen;
    bool padding = false;
    for (int j = 0; j < graph.degree; ++j) {
      if (ids[j] == kInvalidId) {
        padding = true;
        continue;
      }
      ASSERT_FALSE(padding) << "node " << u << ": an edge after the padding";
      ASSERT_NE(ids[j], u) << "self edge at node " << u;
      ASSERT_LT(ids[j], graph.nodes);
      ASSERT_TRUE(seen.insert(ids[j]).second) << "duplicate edge at node " << u;
      ASSERT_LE(lambdas[j], lambda0) << "node " << u;
      if (j > 0) {
        ASSERT_LE(lambdas[j - 1], lambdas[j]) << "λ decreases along node " << u;
      }
    }
  }
}

// How many other edges of node u's stored list occlude edge j (Inequation 1
// of Wang, Wang, Zhao, 2022 with alpha = 1), counted naively with squared L2.
inline int naive_occlusion_count(const Matrix& data, const TsdgGraph& graph, int64_t u, int j) {
  const DistanceFn l2 = distance_kernels().l2_squared;
  const uint32_t* ids = graph.list(u);
  const float to_j = l2(data.row(u), data.row(ids[j]), data.dim);
  int count = 0;
  for (int i = 0; i < graph.degree && ids[i] != kInvalidId; ++i) {
    if (i == j) continue;
    const float to_i = l2(data.row(u), data.row(ids[i]), data.dim);
    if (to_i < to_j && l2(data.row(ids[i]), data.row(ids[j]), data.dim) < to_j) ++count;
  }
  return count;
}

}  // namespace testing
}  // namespace tsdg
