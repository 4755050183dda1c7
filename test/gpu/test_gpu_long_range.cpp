// The long-range candidates widened on the device (long_range.cu) against the
// host's with_long_range_candidates on the same k-NN lists: the same ids in
// each list but where near ties among the pivots rank the other way, in
// ascending order, with exact distances.
#include <algorithm>
#include <cmath>
#include <vector>

#include "bruteforce.h"
#include "distance.h"
#include "gpu_algorithms.h"
#include "gpu_test_support.h"
#include "long_range.h"

namespace tsdg {
namespace {

using gpu_testing::clustered_spec;
using gpu_testing::cpu_control;

TEST(GpuLongRange, WidenedListsAsOnTheHost) {
  TSDG_REQUIRE_GPU();
  (void)gpu_backend;
  const Matrix data = make_clustered(clustered_spec(40000, 32, 80, 7));
  const RunControl control = cpu_control();
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 48, control);
  DiversifyParams params;
  params.pivot_stride = 16;  // 2,500 pivots of which 17 nearest, and 16 random rows
  const KnnGraph on_host = with_long_range_candidates(
      data.view(), Metric::L2, knn, params,
      [&](MatrixView base, MatrixView queries, int k, uint32_t* ids, float* dists) {
        exact_knn(base, queries, Metric::L2, k, ids, dists, control);
      },
      control, nullptr, cuda::kMaxDiversifyList);

  cuda::DeviceContext ctx(0);
  cudaStream_t stream = ctx.stream.get();
  const cuda::DeviceMatrix rows = cuda::DeviceMatrix::upload(data.view(), stream);
  cuda::DeviceBuffer<uint32_t> ids(knn.ids.size());
  cuda::DeviceBuffer<float> dists(knn.dists.size());
  cuda::copy_to_device(ids.data(), knn.ids.data(), knn.ids.size(), stream);
  cuda::copy_to_device(dists.data(), knn.dists.data(), knn.dists.size(), stream);
  const cuda::DeviceKnnLists widened = cuda::with_long_range_candidates_on_device(
      ctx, rows.values.data(), data.rows, data.dim, Metric::L2, ids.data(), dists.data(), knn.k, params,
      RunControl{});
  ASSERT_EQ(widened.k, on_host.k);
  KnnGraph on_device(data.rows, widened.k);
  cuda::copy_to_host(on_device.ids.data(), widened.ids.data(), on_device.ids.size(), stream);
  cuda::copy_to_host(on_device.dists.data(), widened.dists.data(), on_device.dists.size(), stream);
  ctx.stream.synchronize();

  // A pivot at nearly the same distance as the 17th may be found in its
  // place by the other search, all the more as the device ranks pivots by
  // TF32 products: such a row's set differs in one entry.
  int64_t same_ids = 0;
  int64_t unsorted = 0;
  int64_t far_distances = 0;
  for (int64_t u = 0; u < data.rows; ++u) {
    const uint32_t* device_list = on_device.list(u);
    const float* device_dists = on_device.list_dists(u);
    std::vector<uint32_t> a(device_list, device_list + on_device.k);
    std::vector<uint32_t> b(on_host.list(u), on_host.list(u) + on_host.k);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    same_ids += a == b;
    for (int j = 0; j + 1 < on_device.k; ++j) unsorted += device_dists[j] > device_dists[j + 1];
    for (int j = 0; j < on_device.k; ++j) {
      const uint32_t v = device_list[j];
      if (v == kInvalidId) continue;
      EXPECT_NE(v, static_cast<uint32_t>(u));
      const float exact = metric_distance(Metric::L2, data.row(u), data.row(v), data.dim);
      far_distances += std::fabs(device_dists[j] - exact) > 1e-3f * std::max(1.0f, exact);
    }
  }
  EXPECT_EQ(unsorted, 0);
  EXPECT_EQ(far_distances, 0);
  EXPECT_GE(static_cast<double>(same_ids) / data.rows, 0.99);
}

}  // namespace
}  // namespace tsdg
