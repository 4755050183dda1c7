#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "bruteforce.h"
#include "distance.h"
#include "synthetic.h"
#include "thread_pool.h"

namespace tsdg {
namespace {

// The comparison distance computed the slow, obvious way, in double.
double naive_distance(Metric metric, const float* a, const float* b, int dim) {
  double l2 = 0, ip = 0, l1 = 0;
  for (int j = 0; j < dim; ++j) {
    l2 += (double(a[j]) - b[j]) * (double(a[j]) - b[j]);
    ip += double(a[j]) * b[j];
    l1 += std::fabs(double(a[j]) - b[j]);
  }
  switch (metric) {
    case Metric::L2: return l2;
    case Metric::InnerProduct: return -ip;
    case Metric::Cosine: return 1.0 - ip;
    case Metric::L1: return l1;
  }
  return 0.0;
}

// The k nearest by a double loop and a full sort.
std::vector<std::pair<double, uint32_t>> naive_knn(const Matrix& base, const float* q,
                                                   Metric metric, int k) {
  std::vector<std::pair<double, uint32_t>> all;
  for (int64_t i = 0; i < base.rows; ++i) {
    all.emplace_back(naive_distance(metric, q, base.row(i), base.dim), static_cast<uint32_t>(i));
  }
  std::sort(all.begin(), all.end());
  all.resize(std::min<size_t>(k, all.size()));
  return all;
}

Matrix random_rows(int64_t rows, int dim, uint64_t seed, bool normalize) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.dim = dim;
  spec.clusters = 5;
  spec.intrinsic_dim = std::min(dim, 6);
  spec.seed = seed;
  Matrix m = make_clustered(spec);
  if (normalize) normalize_rows(m.values.data(), m.rows, m.dim);
  return m;
}

// Checks ids and distances against the naive answer; where two distances tie
// within rounding the order of their ids may differ, so ids are compared
// only where the gap to the neighbors is clear.
void expect_matches_naive(const Matrix& base, const Matrix& queries, Metric metric, int k,
                          const std::vector<uint32_t>& ids, const std::vector<float>& dists) {
  for (int64_t q = 0; q < queries.rows; ++q) {
    const auto expected = naive_knn(base, queries.row(q), metric, k);
    for (int j = 0; j < k; ++j) {
      const size_t at = static_cast<size_t>(q) * k + j;
      if (j >= static_cast<int>(expected.size())) {
        EXPECT_EQ(ids[at], kInvalidId);
        EXPECT_TRUE(std::isinf(dists[at]));
        continue;
      }
      const double scale = std::max(1.0, std::fabs(expected[j].first));
      EXPECT_NEAR(dists[at], expected[j].first, 1e-4 * scale) << "query " << q << " rank " << j;
      const bool clear_before = j == 0 || expected[j].first - expected[j - 1].first > 1e-3 * scale;
      const bool clear_after = j + 1 >= static_cast<int>(expected.size()) ||
                               expected[j + 1].first - expected[j].first > 1e-3 * scale;
      if (clear_before && clear_after) {
        EXPECT_EQ(ids[at], expected[j].second) << "query " << q;
      }
    }
  }
}

class BruteForceMetric : public ::testing::TestWithParam<Metric> {};

TEST_P(BruteForceMetric, MatchesNaiveLoop) {
  const Metric metric = GetParam();
  const bool normalize = metric == Metric::Cosine;
  // Sizes that leave partial tiles, panels and blocks everywhere.
  const Matrix base = random_rows(1237, 37, 3, normalize);
  const Matrix queries = random_rows(101, 37, 4, normalize);
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const int k = 13;
  std::vector<uint32_t> ids(queries.rows * k);
  std::vector<float> dists(queries.rows * k);
  exact_knn(base.view(), queries.view(), metric, k, ids.data(), dists.data(), control);
  expect_matches_naive(base, queries, metric, k, ids, dists);
}

INSTANTIATE_TEST_SUITE_P(Metrics, BruteForceMetric,
                         ::testing::Values(Metric::L2, Metric::InnerProduct, Metric::Cosine, Metric::L1));

TEST(BruteForce, PadsWhenBaseIsSmallerThanK) {
  const Matrix base = random_rows(5, 8, 1, false);
  const Matrix queries = random_rows(3, 8, 2, false);
  std::vector<uint32_t> ids(3 * 9);
  std::vector<float> dists(3 * 9);
  exact_knn(base.view(), queries.view(), Metric::L2, 9, ids.data(), dists.data(), RunControl{});
  expect_matches_naive(base, queries, Metric::L2, 9, ids, dists);
}

TEST(BruteForce, SameResultOnAnyThreadCount) {
  const Matrix base = random_rows(3000, 16, 5, false);
  const Matrix queries = random_rows(200, 16, 6, false);
  std::vector<uint32_t> one(200 * 10), two(200 * 10);
  std::vector<float> d1(200 * 10), d2(200 * 10);
  exact_knn(base.view(), queries.view(), Metric::L2, 10, one.data(), d1.data(), RunControl{});
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  exact_knn(base.view(), queries.view(), Metric::L2, 10, two.data(), d2.data(), control);
  EXPECT_EQ(one, two);
  EXPECT_EQ(d1, d2);
}

TEST(BruteForce, GraphExcludesSelf) {
  const Matrix data = random_rows(700, 12, 7, false);
  const KnnGraph graph = exact_knn_graph(data.view(), Metric::L2, 8, RunControl{});
  ASSERT_EQ(graph.nodes, 700);
  ASSERT_EQ(graph.k, 8);
  for (int64_t i = 0; i < graph.nodes; ++i) {
    const auto expected = naive_knn(data, data.row(i), Metric::L2, 9);
    for (int j = 0; j < 8; ++j) {
      EXPECT_NE(graph.list(i)[j], static_cast<uint32_t>(i));
      EXPECT_NEAR(graph.list_dists(i)[j], expected[j + 1].first, 1e-3 * std::max(1.0, expected[j + 1].first));
    }
  }
}

TEST(BruteForce, RejectsBadArguments) {
  const Matrix base = random_rows(10, 8, 1, false);
  const Matrix queries = random_rows(2, 4, 2, false);
  std::vector<uint32_t> ids(20);
  std::vector<float> dists(20);
  EXPECT_THROW(exact_knn(base.view(), queries.view(), Metric::L2, 3, ids.data(), dists.data(), RunControl{}), Error);
  EXPECT_THROW(exact_knn(base.view(), base.view(), Metric::L2, 0, ids.data(), dists.data(), RunControl{}), Error);
}

TEST(BruteForce, Cancels) {
  const Matrix data = random_rows(4000, 32, 9, false);
  std::atomic<bool> cancel{true};
  RunControl control;
  control.cancel = &cancel;
  try {
    exact_knn_graph(data.view(), Metric::L2, 10, control);
    FAIL() << "expected Cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Cancelled);
  }
}

}  // namespace
}  // namespace tsdg
