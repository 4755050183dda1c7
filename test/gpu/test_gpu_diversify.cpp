// GPU TSDG diversification: the list invariants of the CPU tests, occlusion
// factors equal to a naive count of Inequation 1, the paper's line example,
// and the same lists as the CPU diversify_tsdg on the same k-NN graph.

#include "bruteforce.h"
#include "distance.h"
#include "diversify.h"
#include "gpu_test_support.h"
#include "../unit/graph_invariants.h"

namespace tsdg {
namespace {

using gpu_testing::clustered_spec;
using gpu_testing::cpu_control;
using testing::expect_list_invariants;
using testing::naive_occlusion_count;

TEST(GpuDiversify, ListInvariantsAndSameListsAsCpu) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(20000, 24, 12, 3));
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 32, cpu_control());
  for (const DiversifyParams& params :
       {DiversifyParams{16, 1.2f, 3}, DiversifyParams{32, 1.2f, 10}, DiversifyParams{8, 1.0f, 0}}) {
    const TsdgGraph on_gpu = gpu_backend.diversify(data.view(), Metric::L2, knn, params, RunControl{});
    ASSERT_EQ(on_gpu.nodes, data.rows);
    ASSERT_EQ(on_gpu.degree, params.degree);
    expect_list_invariants(on_gpu, params.lambda0);
    const TsdgGraph on_cpu = diversify_tsdg(data.view(), Metric::L2, knn, params, cpu_control());
    // Float rounding of the pair distances may flip a borderline occlusion.
    int64_t same = 0;
    for (int64_t u = 0; u < data.rows; ++u) {
      bool equal = true;
      for (int j = 0; j < params.degree && equal; ++j) {
        equal = on_gpu.list(u)[j] == on_cpu.list(u)[j] && on_gpu.list_lambdas(u)[j] == on_cpu.list_lambdas(u)[j];
      }
      same += equal;
    }
    EXPECT_GE(static_cast<double>(same) / data.rows, 0.99) << "degree " << params.degree;
  }
}

TEST(GpuDiversify, OcclusionFactorsCountInequationOne) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(1500, 16, 8, 5));
  const int k = 24;
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, k, cpu_control());
  const TsdgGraph graph =
      gpu_backend.diversify(data.view(), Metric::L2, knn, DiversifyParams{2 * k, 1.2f, 254}, RunControl{});
  int64_t positive = 0;
  for (int64_t u = 0; u < graph.nodes; ++u) {
    const uint32_t* ids = graph.list(u);
    if (ids[graph.degree - 1] != kInvalidId) continue;  // full: candidates may be cut
    for (int j = 0; j < graph.degree && ids[j] != kInvalidId; ++j) {
      const int expected = naive_occlusion_count(data, graph, u, j);
      ASSERT_NEAR(graph.list_lambdas(u)[j], expected, 1) << "node " << u << " edge " << j;
      positive += expected > 0;
    }
  }
  EXPECT_GT(positive, 0);
}

TEST(GpuDiversify, PointsOnALineKeepOnlyAdjacentEdges) {
  TSDG_REQUIRE_GPU();
  Matrix data(4, 2);
  for (int i = 0; i < 4; ++i) data.row(i)[0] = static_cast<float>(i);
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 3, cpu_control());
  const TsdgGraph graph = gpu_backend.diversify(data.view(), Metric::L2, knn, DiversifyParams{3, 1.2f, 10}, RunControl{});
  const std::vector<std::vector<uint32_t>> expected = {{1}, {0, 2}, {1, 3}, {2}};
  for (int u = 0; u < 4; ++u) {
    std::vector<uint32_t> found;
    for (int j = 0; j < 3 && graph.list(u)[j] != kInvalidId; ++j) {
      found.push_back(graph.list(u)[j]);
      EXPECT_EQ(graph.list_lambdas(u)[j], 0);
    }
    EXPECT_EQ(found, expected[u]) << "node " << u;
  }
}

}  // namespace
}  // namespace tsdg
