// GPU exact sets: the rows in device memory answer what a float64 brute
// force over every row appended answers, and what the CPU backend's set
// answers, through appends of uneven pieces, growth of the device buffers,
// clear and padding, for L2 (with norms) and inner product (without).
#include <algorithm>
#include <memory>
#include <vector>

#include "gpu_test_support.h"
#include "../unit/exact_set_checks.h"

namespace tsdg {
namespace {

using gpu_testing::cpu_control;
using testing::append_rows;
using testing::distance_tolerance;
using testing::expect_set_search_exact;
using testing::uniform_rows;

// The GPU set's answer against the CPU set's: the same ids (ties aside) and
// distances within rounding.
void expect_same_as_cpu(ExactSet& gpu_set, ExactSet& cpu_set, const Matrix& all, const Matrix& queries,
                        int k) {
  const size_t count = static_cast<size_t>(queries.rows) * k;
  std::vector<uint32_t> gpu_ids(count), cpu_ids(count);
  std::vector<float> gpu_dists(count), cpu_dists(count);
  gpu_set.search(queries.view(), k, gpu_ids.data(), gpu_dists.data(), RunControl{});
  cpu_set.search(queries.view(), k, cpu_ids.data(), cpu_dists.data(), cpu_control());
  const int present = static_cast<int>(std::min<int64_t>(k, all.rows));
  EXPECT_GE(recall_at(gpu_ids.data(), k, cpu_ids.data(), k, queries.rows, present), 0.999);
  const double tolerance = distance_tolerance(all.view(), queries.view());
  for (size_t at = 0; at < count; ++at) {
    if (cpu_ids[at] == kInvalidId) {
      ASSERT_EQ(gpu_ids[at], kInvalidId) << "entry " << at;
      continue;
    }
    ASSERT_NEAR(gpu_dists[at], cpu_dists[at], tolerance) << "entry " << at;
  }
}

class GpuExactSetMetric : public ::testing::TestWithParam<Metric> {};

// Five appends of 30k rows of 128 dimensions: the device buffers are
// outgrown and their rows moved several times.
TEST_P(GpuExactSetMetric, GrowsPastItsBuffersAndMatchesTheCpu) {
  TSDG_REQUIRE_GPU();
  const Metric metric = GetParam();
  const int dim = 128;
  const int k = 16;
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const std::unique_ptr<ExactSet> gpu_set = gpu_backend.make_exact_set(dim, metric);
  const std::unique_ptr<ExactSet> cpu_set = cpu->make_exact_set(dim, metric);
  const Matrix queries = uniform_rows(20, dim, 100, metric);
  const size_t bytes_per_row = (dim + (metric == Metric::L2 ? 1 : 0)) * sizeof(float);
  Matrix all;
  size_t first_memory = 0;
  for (int append = 0; append < 5; ++append) {
    const Matrix rows = uniform_rows(30000, dim, 200 + append, metric);
    gpu_set->append(rows.view(), RunControl{});
    cpu_set->append(rows.view(), RunControl{});
    append_rows(all, rows);
    ASSERT_EQ(gpu_set->size(), all.rows);
    EXPECT_GE(gpu_set->memory_bytes(), static_cast<size_t>(all.rows) * bytes_per_row);
    if (append == 0) first_memory = gpu_set->memory_bytes();
    expect_set_search_exact(*gpu_set, all, queries, metric, k, RunControl{});
    expect_same_as_cpu(*gpu_set, *cpu_set, all, queries, k);
  }
  EXPECT_GT(gpu_set->memory_bytes(), first_memory);
}

// Pieces of a row, a thousand, none, ...; then a clear and a refill, whose
// ids start at 0 again; padding on the empty set and where k passes the size.
TEST_P(GpuExactSetMetric, UnevenAppendsClearAndPadding) {
  TSDG_REQUIRE_GPU();
  const Metric metric = GetParam();
  const int dim = 33;  // odd, as row lengths go
  const std::unique_ptr<ExactSet> set = gpu_backend.make_exact_set(dim, metric);
  const Matrix queries = uniform_rows(50, dim, 7, metric);
  expect_set_search_exact(*set, Matrix(), queries, metric, 5, RunControl{});
  Matrix all;
  uint64_t seed = 1;
  for (const int64_t piece : {1, 1000, 37, 0, 250, 3}) {
    const Matrix rows = uniform_rows(piece, dim, seed++, metric);
    set->append(rows.view(), RunControl{});
    append_rows(all, rows);
    ASSERT_EQ(set->size(), all.rows);
    expect_set_search_exact(*set, all, queries, metric, 10, RunControl{});
  }
  const size_t memory = set->memory_bytes();
  set->clear();
  EXPECT_EQ(set->size(), 0);
  EXPECT_EQ(set->memory_bytes(), memory);
  expect_set_search_exact(*set, Matrix(), queries, metric, 10, RunControl{});

  const Matrix refill = uniform_rows(6, dim, 50, metric);
  set->append(refill.view(), RunControl{});
  EXPECT_EQ(set->memory_bytes(), memory);
  expect_set_search_exact(*set, refill, queries, metric, 9, RunControl{});
}

INSTANTIATE_TEST_SUITE_P(Metrics, GpuExactSetMetric, ::testing::Values(Metric::L2, Metric::InnerProduct));

TEST(GpuExactSet, RejectsBadArguments) {
  TSDG_REQUIRE_GPU();
  const std::unique_ptr<ExactSet> set = gpu_backend.make_exact_set(8, Metric::L2);
  const Matrix rows = uniform_rows(10, 8, 1, Metric::L2);
  const Matrix other = uniform_rows(10, 6, 2, Metric::L2);
  set->append(rows.view(), RunControl{});
  std::vector<uint32_t> ids(10 * 2049);
  std::vector<float> dists(ids.size());
  for (const auto& bad : {std::make_pair(rows.view(), 2049), std::make_pair(other.view(), 5)}) {
    try {
      set->search(bad.first, bad.second, ids.data(), dists.data(), RunControl{});
      FAIL() << "no exception";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument);
    }
  }
  EXPECT_THROW(set->append(other.view(), RunControl{}), Error);
  EXPECT_EQ(set->size(), 10);
  EXPECT_THROW(gpu_backend.make_exact_set(0, Metric::L2), Error);
}

}  // namespace
}  // namespace tsdg
