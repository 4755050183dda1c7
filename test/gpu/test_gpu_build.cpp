// The GPU index build (Backend::build_tsdg_graph): GNND and both TSDG stages
// with the lists kept on the device between them give the lists and the graph
// that the two steps called apart give on those lists.
#include <atomic>
#include <vector>

#include "bruteforce.h"
#include "gpu_test_support.h"
#include "../unit/graph_invariants.h"

namespace tsdg {
namespace {

using gpu_testing::clustered_spec;
using gpu_testing::cpu_control;
using gpu_testing::graph_recall;
using testing::expect_list_invariants;

TEST(GpuBuild, ListsKeptOnTheDeviceGiveTheGraphOfTheTwoSteps) {
  TSDG_REQUIRE_GPU();
  const Matrix data = make_clustered(clustered_spec(30000, 48, 40, 3));
  GnndParams gnnd;
  gnnd.k = 32;
  const DiversifyParams diversify;
  KnnGraph handed_out(data.rows, gnnd.k);
  std::atomic<int> phase{0};
  RunControl control;
  control.phase = &phase;
  const TsdgGraph graph = gpu_backend.build_tsdg_graph(data.view(), Metric::L2, gnnd, diversify,
                                                       handed_out.ids.data(), handed_out.dists.data(), control);
  EXPECT_EQ(phase.load(), static_cast<int>(Phase::Diversify));
  ASSERT_EQ(graph.nodes, data.rows);
  expect_list_invariants(graph, diversify.lambda0);

  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, cpu_control());
  const double recall = graph_recall(handed_out, exact, 10);
  std::printf("build: k-NN recall@10 of the lists handed out %.4f\n", recall);
  EXPECT_GE(recall, 0.9);

  // Diversifying the handed-out lists apart gives the same graph.
  const TsdgGraph apart = gpu_backend.diversify(data.view(), Metric::L2, handed_out, diversify, RunControl{});
  int64_t same = 0;
  for (int64_t u = 0; u < data.rows; ++u) {
    bool equal = true;
    for (int j = 0; j < graph.degree && equal; ++j) {
      equal = graph.list(u)[j] == apart.list(u)[j] && graph.list_lambdas(u)[j] == apart.list_lambdas(u)[j];
    }
    same += equal;
  }
  EXPECT_EQ(same, data.rows);

  // Without output arrays the graph is built all the same.
  const TsdgGraph without_lists =
      gpu_backend.build_tsdg_graph(data.view(), Metric::L2, gnnd, diversify, nullptr, nullptr, RunControl{});
  expect_list_invariants(without_lists, diversify.lambda0);
}

// What the device lacks for the build of a shape follows its usable memory
// byte for byte, and is nothing where it has enough.
TEST(GpuBuild, DeviceShortfallFollowsTheUsableMemory) {
  TSDG_REQUIRE_GPU();
  const MatrixView shape{nullptr, 30000, 48};  // its build needs well over 16 MiB
  GnndParams gnnd;
  gnnd.k = 32;
  const DiversifyParams diversify;
  EXPECT_EQ(gpu_backend.build_device_shortfall(shape, gnnd, diversify), 0u);
  ::setenv("TSDG_GPU_MEMORY_LIMIT_MB", "12", 1);
  const size_t at_12 = gpu_backend.build_device_shortfall(shape, gnnd, diversify);
  ::setenv("TSDG_GPU_MEMORY_LIMIT_MB", "16", 1);
  const size_t at_16 = gpu_backend.build_device_shortfall(shape, gnnd, diversify);
  ::unsetenv("TSDG_GPU_MEMORY_LIMIT_MB");
  EXPECT_GT(at_16, 0u);
  EXPECT_EQ(at_12 - at_16, size_t{4} << 20);
  // too few rows to sample lists from: no build on the device would take them
  EXPECT_EQ(gpu_backend.build_device_shortfall(MatrixView{nullptr, 100, 48}, gnnd, diversify), 0u);
}

}  // namespace
}  // namespace tsdg
