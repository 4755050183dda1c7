// The CPU backend's exact sets (Backend::make_exact_set's host copy) and the
// C interface to them: appends in uneven pieces, clear, padding and bad
// input; every answer checked against a float64 brute force over the rows
// appended.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend.h"
#include "exact_set_checks.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

using testing::append_rows;
using testing::expect_exact_knn;
using testing::expect_set_search_exact;
using testing::uniform_rows;

constexpr int kDim = 24;

class ExactSetMetric : public ::testing::TestWithParam<Metric> {};

TEST_P(ExactSetMetric, UnevenAppendsMatchBruteForce) {
  const Metric metric = GetParam();
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::unique_ptr<ExactSet> set = cpu->make_exact_set(kDim, metric);
  const Matrix queries = uniform_rows(40, kDim, 99, metric);
  Matrix all;
  uint64_t seed = 1;
  for (const int64_t piece : {1, 1000, 37, 0, 250, 3}) {
    const Matrix rows = uniform_rows(piece, kDim, seed++, metric);
    set->append(rows.view(), RunControl{});
    append_rows(all, rows);
    ASSERT_EQ(set->size(), all.rows);
    expect_set_search_exact(*set, all, queries, metric, 10, RunControl{});
  }
  EXPECT_GE(set->memory_bytes(), all.values.size() * sizeof(float));
}

INSTANTIATE_TEST_SUITE_P(Metrics, ExactSetMetric,
                         ::testing::Values(Metric::L2, Metric::InnerProduct, Metric::Cosine));

TEST(ExactSet, ClearKeepsTheMemoryAndStartsTheIdsAgain) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::unique_ptr<ExactSet> set = cpu->make_exact_set(kDim, Metric::L2);
  const Matrix queries = uniform_rows(20, kDim, 7, Metric::L2);
  set->append(uniform_rows(500, kDim, 8, Metric::L2).view(), RunControl{});
  const size_t memory = set->memory_bytes();

  set->clear();
  EXPECT_EQ(set->size(), 0);
  EXPECT_EQ(set->memory_bytes(), memory);
  expect_set_search_exact(*set, Matrix(), queries, Metric::L2, 5, RunControl{});

  const Matrix refill = uniform_rows(300, kDim, 9, Metric::L2);
  set->append(refill.view(), RunControl{});
  EXPECT_EQ(set->size(), 300);
  EXPECT_EQ(set->memory_bytes(), memory);
  expect_set_search_exact(*set, refill, queries, Metric::L2, 5, RunControl{});
}

TEST(ExactSet, PadsWhenEmptyOrSmallerThanK) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::unique_ptr<ExactSet> set = cpu->make_exact_set(kDim, Metric::InnerProduct);
  const Matrix queries = uniform_rows(6, kDim, 11, Metric::InnerProduct);
  expect_set_search_exact(*set, Matrix(), queries, Metric::InnerProduct, 4, RunControl{});
  const Matrix rows = uniform_rows(3, kDim, 12, Metric::InnerProduct);
  set->append(rows.view(), RunControl{});
  expect_set_search_exact(*set, rows, queries, Metric::InnerProduct, 8, RunControl{});
}

TEST(ExactSet, RefusesRowsOfAnotherDimension) {
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::unique_ptr<ExactSet> set = cpu->make_exact_set(kDim, Metric::L2);
  const Matrix rows = uniform_rows(4, kDim + 1, 13, Metric::L2);
  try {
    set->append(rows.view(), RunControl{});
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::InvalidArgument);
  }
  EXPECT_EQ(set->size(), 0);
  EXPECT_THROW(cpu->make_exact_set(0, Metric::L2), Error);
}

// Through the C API with the CPU backend: ids are positions in append order,
// as tsdg_exact_knn numbers the rows of their concatenation.
TEST(ExactSetCApi, AppendSearchClearFree) {
  TsdgError error;
  TsdgExactSet* set = tsdg_exact_set_create(nullptr, kDim, TSDG_METRIC_L2, &error);
  ASSERT_NE(set, nullptr) << error.message;
  EXPECT_EQ(tsdg_exact_set_size(set), 0);
  Matrix all;
  uint64_t seed = 21;
  for (const int64_t piece : {1, 1000, 37}) {
    const Matrix rows = uniform_rows(piece, kDim, seed++, Metric::L2);
    ASSERT_EQ(tsdg_exact_set_append(set, rows.values.data(), rows.rows, &error), TSDG_OK) << error.message;
    append_rows(all, rows);
  }
  EXPECT_EQ(tsdg_exact_set_size(set), all.rows);
  EXPECT_GE(tsdg_exact_set_memory_bytes(set), all.values.size() * sizeof(float));

  const int k = 10;
  const Matrix queries = uniform_rows(30, kDim, 5, Metric::L2);
  std::vector<uint32_t> ids(queries.rows * k), knn_ids(ids.size());
  std::vector<float> dists(ids.size()), knn_dists(ids.size());
  ASSERT_EQ(tsdg_exact_set_search(set, queries.values.data(), queries.rows, k, ids.data(), dists.data(),
                                  &error),
            TSDG_OK)
      << error.message;
  expect_exact_knn(all.view(), queries.view(), Metric::L2, k, ids.data(), dists.data());
  ASSERT_EQ(tsdg_exact_knn(nullptr, all.values.data(), all.rows, queries.values.data(), queries.rows, kDim,
                           TSDG_METRIC_L2, k, knn_ids.data(), knn_dists.data(), &error),
            TSDG_OK);
  EXPECT_EQ(ids, knn_ids);
  EXPECT_EQ(dists, knn_dists);

  tsdg_exact_set_clear(set);
  EXPECT_EQ(tsdg_exact_set_size(set), 0);
  ASSERT_EQ(tsdg_exact_set_search(set, queries.values.data(), queries.rows, k, ids.data(), dists.data(),
                                  &error),
            TSDG_OK);
  expect_exact_knn(MatrixView{nullptr, 0, kDim}, queries.view(), Metric::L2, k, ids.data(), dists.data());
  tsdg_exact_set_free(set);
}

// Enough work per batch that the search runs on the set's thread pool.
TEST(ExactSetCApi, LargeBatchesMatchBruteForce) {
  const int dim = 64;
  const Matrix rows = uniform_rows(20000, dim, 31, Metric::InnerProduct);
  const Matrix queries = uniform_rows(100, dim, 32, Metric::InnerProduct);
  ASSERT_GT(static_cast<double>(rows.rows) * queries.rows * dim, 1e8);
  TsdgError error;
  TsdgExactSet* set = tsdg_exact_set_create(nullptr, dim, TSDG_METRIC_INNER_PRODUCT, &error);
  ASSERT_NE(set, nullptr) << error.message;
  ASSERT_EQ(tsdg_exact_set_append(set, rows.values.data(), rows.rows, &error), TSDG_OK) << error.message;
  const int k = 20;
  std::vector<uint32_t> ids(queries.rows * k);
  std::vector<float> dists(ids.size());
  ASSERT_EQ(tsdg_exact_set_search(set, queries.values.data(), queries.rows, k, ids.data(), dists.data(),
                                  &error),
            TSDG_OK)
      << error.message;
  expect_exact_knn(rows.view(), queries.view(), Metric::InnerProduct, k, ids.data(), dists.data());
  tsdg_exact_set_free(set);
}

TEST(ExactSetCApi, BadInputIsReportedNotThrown) {
  TsdgError error;
  EXPECT_EQ(tsdg_exact_set_create(nullptr, 0, TSDG_METRIC_L2, &error), nullptr);
  EXPECT_GT(std::strlen(error.message), 0u);
  EXPECT_EQ(tsdg_exact_set_create(nullptr, 4, static_cast<TsdgMetric>(4), &error), nullptr);

  TsdgExactSet* set = tsdg_exact_set_create(nullptr, 2, TSDG_METRIC_L2, &error);
  ASSERT_NE(set, nullptr) << error.message;
  const float rows[4] = {0, 1, 2, 3};
  EXPECT_EQ(tsdg_exact_set_append(set, nullptr, 2, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_append(set, rows, -1, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_append(nullptr, rows, 2, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_append(set, nullptr, 0, &error), TSDG_OK) << error.message;
  ASSERT_EQ(tsdg_exact_set_append(set, rows, 2, &error), TSDG_OK) << error.message;

  uint32_t ids[2 * TSDG_EXACT_SET_MAX_K];
  float dists[2 * TSDG_EXACT_SET_MAX_K];
  EXPECT_EQ(tsdg_exact_set_search(set, rows, 2, 0, ids, dists, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_search(set, rows, 2, -3, ids, dists, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_search(set, rows, 1, TSDG_EXACT_SET_MAX_K + 1, ids, dists, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_search(set, nullptr, 2, 1, ids, dists, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_search(set, rows, 2, 1, nullptr, dists, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_exact_set_search(nullptr, rows, 2, 1, ids, dists, &error), TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_GT(std::strlen(error.message), 0u);

  // The largest k is accepted and padded past the set's two rows.
  ASSERT_EQ(tsdg_exact_set_search(set, rows, 2, TSDG_EXACT_SET_MAX_K, ids, dists, &error), TSDG_OK)
      << error.message;
  EXPECT_EQ(ids[0], 0u);
  EXPECT_EQ(ids[1], 1u);
  EXPECT_EQ(ids[2], TSDG_INVALID_ID);
  EXPECT_TRUE(std::isinf(dists[TSDG_EXACT_SET_MAX_K - 1]));
  EXPECT_EQ(ids[TSDG_EXACT_SET_MAX_K], 1u);

  EXPECT_EQ(tsdg_exact_set_size(nullptr), 0);
  EXPECT_EQ(tsdg_exact_set_memory_bytes(nullptr), 0u);
  tsdg_exact_set_clear(nullptr);
  tsdg_exact_set_free(set);
  tsdg_exact_set_free(nullptr);
}

}  // namespace
}  // namespace tsdg
