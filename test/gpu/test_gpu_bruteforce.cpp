// GPU brute force: the same neighbors as the CPU brute force (ties aside), and
// distances that match a float64 recomputation, over several tiles, metrics
// and k, including k larger than the base.
#include <algorithm>
#include <cmath>
#include <limits>

#include "bruteforce.h"
#include "distance.h"
#include "gpu_test_support.h"

namespace tsdg {
namespace {

using gpu_testing::clustered_spec;
using gpu_testing::cpu_control;

double reference_distance(Metric metric, const float* a, const float* b, int dim) {
  double sum = 0.0;
  for (int i = 0; i < dim; ++i) {
    sum += metric == Metric::L2 ? (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i])
                                : static_cast<double>(a[i]) * b[i];
  }
  if (metric == Metric::InnerProduct) return -sum;
  if (metric == Metric::Cosine) return 1.0 - sum;
  return sum;
}

void check_against_cpu(Backend& gpu_backend, const Matrix& base, const Matrix& queries, Metric metric,
                       int k) {
  const size_t count = static_cast<size_t>(queries.rows) * k;
  std::vector<uint32_t> gpu_ids(count, 12345u);
  std::vector<float> gpu_dists(count, -1.0f);
  gpu_backend.exact_knn(base.view(), queries.view(), metric, k, gpu_ids.data(), gpu_dists.data(),
                        RunControl{});
  std::vector<uint32_t> cpu_ids(count);
  std::vector<float> cpu_dists(count);
  exact_knn(base.view(), queries.view(), metric, k, cpu_ids.data(), cpu_dists.data(), cpu_control());

  const int present = static_cast<int>(std::min<int64_t>(k, base.rows));
  const double recall = recall_at(gpu_ids.data(), k, cpu_ids.data(), k, queries.rows, present);
  EXPECT_GE(recall, 0.999) << "k=" << k;
  // The norms trick loses about eps * (|q|^2 + |b|^2) to cancellation.
  double scale = 1.0;
  for (int64_t i = 0; i < base.rows; ++i) {
    scale = std::max(scale, 2.0 * reference_distance(Metric::InnerProduct, base.row(i), base.row(i), base.dim) * -1.0);
  }
  for (int64_t i = 0; i < queries.rows; ++i) {
    scale = std::max(scale, 2.0 * reference_distance(Metric::InnerProduct, queries.row(i), queries.row(i), base.dim) * -1.0);
  }
  const double tolerance = 1e-5 * scale;
  for (int64_t q = 0; q < queries.rows; ++q) {
    for (int j = 0; j < k; ++j) {
      const size_t at = static_cast<size_t>(q) * k + j;
      if (j > 0) {
        ASSERT_LE(gpu_dists[at - 1], gpu_dists[at]) << "row " << q << " not ascending";
      }
      if (static_cast<int64_t>(j) >= base.rows) {
        ASSERT_EQ(gpu_ids[at], kInvalidId);
        continue;
      }
      ASSERT_LT(gpu_ids[at], base.rows);
      // The k-th distance is the same whichever tied row was chosen.
      ASSERT_NEAR(gpu_dists[at], cpu_dists[at], tolerance) << "row " << q;
      const double exact = reference_distance(metric, queries.row(q), base.row(gpu_ids[at]), base.dim);
      ASSERT_NEAR(gpu_dists[at], exact, tolerance) << "row " << q;
    }
  }
}

TEST(GpuBruteForce, MatchesCpuAcrossTilesAndK) {
  TSDG_REQUIRE_GPU();
  // 70k base rows span three base tiles of 32768.
  const SyntheticSpec spec = clustered_spec(70000, 40, 32, 5);
  const Matrix base = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 300, 9);
  for (int k : {1, 10, 100, 700}) check_against_cpu(gpu_backend, base, queries, Metric::L2, k);
}

TEST(GpuBruteForce, InnerProductAndCosine) {
  TSDG_REQUIRE_GPU();
  const SyntheticSpec spec = clustered_spec(9000, 33, 16, 6);  // odd dimension
  Matrix base = make_clustered(spec);
  Matrix queries = make_clustered_queries(spec, 200, 3);
  check_against_cpu(gpu_backend, base, queries, Metric::InnerProduct, 16);
  normalize_rows(base.values.data(), base.rows, base.dim);
  normalize_rows(queries.values.data(), queries.rows, queries.dim);
  check_against_cpu(gpu_backend, base, queries, Metric::Cosine, 16);
}

TEST(GpuBruteForce, FewerRowsThanK) {
  TSDG_REQUIRE_GPU();
  const SyntheticSpec spec = clustered_spec(5, 8, 2, 7);
  const Matrix base = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 4, 1);
  check_against_cpu(gpu_backend, base, queries, Metric::L2, 9);
}

TEST(GpuBruteForce, RejectsBadArguments) {
  TSDG_REQUIRE_GPU();
  const Matrix base = make_clustered(clustered_spec(100, 8, 2, 1));
  const Matrix other = make_clustered(clustered_spec(10, 6, 2, 1));
  std::vector<uint32_t> ids(100);
  std::vector<float> dists(100);
  try {
    gpu_backend.exact_knn(base.view(), other.view(), Metric::L2, 5, ids.data(), dists.data(), RunControl{});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
  }
}

// L1 has no matrix-product form: the GPU backend says it does not compute
// it, and its exact k-NN and search index refuse it rather than answer by
// another metric's distances.
TEST(GpuBackend, RefusesL1) {
  TSDG_REQUIRE_GPU();
  EXPECT_FALSE(gpu_backend.computes(Metric::L1));
  EXPECT_TRUE(gpu_backend.computes(Metric::L2));
  const Matrix base = make_clustered(clustered_spec(200, 8, 2, 1));
  std::vector<uint32_t> ids(200 * 5);
  std::vector<float> dists(ids.size());
  EXPECT_THROW(gpu_backend.exact_knn(base.view(), base.view(), Metric::L1, 5, ids.data(), dists.data(), RunControl{}),
               Error);
  const std::vector<uint32_t> neighbors(200 * 4, 0);
  const std::vector<uint8_t> lambdas(neighbors.size(), 0);
  EXPECT_THROW(gpu_backend.make_search_index(base.view(), GraphView{neighbors.data(), lambdas.data(), 200, 4},
                                             Metric::L1, nullptr),
               Error);
}

TEST(GpuBackend, MissingDeviceGivesAMessage) {
  TSDG_REQUIRE_GPU();
  char message[256] = {0};
  Backend* none = tsdg_cuda_create_backend(999, message, sizeof(message));
  EXPECT_EQ(none, nullptr);
  EXPECT_NE(std::string(message).find("999"), std::string::npos) << message;
  EXPECT_NE(std::string(gpu_backend.name()).find("cuda"), std::string::npos);
}

}  // namespace
}  // namespace tsdg
