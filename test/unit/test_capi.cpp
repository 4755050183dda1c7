// The C interface end to end: build, merge and search through tsdg_capi.h,
// cancellation through the poll callback, and error statuses for bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "bruteforce.h"
#include "search.h"
#include "synthetic.h"
#include "capi_test_util.h"
#include "tsdg_capi.h"
#include "tsdg_test_graphs.h"

namespace tsdg {
namespace {

// record_bytes of tsdg_unreached_job_start that keeps every walk
constexpr int64_t kAllRecords = int64_t{1} << 40;

using testing::expect_layer_of;
using testing::small_clustered_spec;

struct Built {
  std::vector<uint32_t> neighbors;
  std::vector<uint8_t> lambdas;
  std::vector<uint32_t> knn_ids;
  std::vector<float> knn_dists;
};

TsdgBuildParams small_params() { return testing::capi_test_params(24); }

Built build(const Matrix& data, const TsdgBuildParams& params) {
  Built b;
  b.neighbors.resize(data.rows * params.degree);
  b.lambdas.resize(b.neighbors.size());
  b.knn_ids.resize(data.rows * params.build_k);
  b.knn_dists.resize(b.knn_ids.size());
  TsdgError error;
  const TsdgStatus status = tsdg_build_graph(
      nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, &params,
      b.neighbors.data(), b.lambdas.data(), b.knn_ids.data(), b.knn_dists.data(), nullptr,
      nullptr, &error);
  EXPECT_EQ(status, TSDG_OK) << error.message;
  return b;
}

double recall_of(const std::vector<uint32_t>& found, const std::vector<uint32_t>& truth, int k) {
  int64_t hits = 0;
  const int64_t rows = static_cast<int64_t>(truth.size()) / k;
  for (int64_t q = 0; q < rows; ++q) {
    const std::set<uint32_t> expected(truth.begin() + q * k, truth.begin() + (q + 1) * k);
    for (int j = 0; j < k; ++j) hits += expected.count(found[q * k + j]);
  }
  return static_cast<double>(hits) / (rows * k);
}

std::vector<uint32_t> exact_ids(const Matrix& data, const Matrix& queries, int k) {
  std::vector<uint32_t> ids(queries.rows * k);
  std::vector<float> dists(ids.size());
  TsdgError error;
  EXPECT_EQ(tsdg_exact_knn(nullptr, data.values.data(), data.rows, queries.values.data(),
                           queries.rows, data.dim, TSDG_METRIC_L2, k, ids.data(), dists.data(),
                           &error),
            TSDG_OK)
      << error.message;
  return ids;
}

TEST(CApi, BuildUploadSearch) {
  const SyntheticSpec spec = small_clustered_spec(8000, 24, 10, 31);
  const Matrix data = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 200, 5);
  const TsdgBuildParams params = small_params();
  const Built b = build(data, params);
  const int k = 10;
  TsdgError error;
  TsdgResidentIndex* index =
      tsdg_index_upload(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                        b.neighbors.data(), b.lambdas.data(), params.degree, &error);
  ASSERT_NE(index, nullptr) << error.message;
  std::vector<uint32_t> ids(queries.rows * k);
  std::vector<float> dists(ids.size());
  ASSERT_EQ(tsdg_index_search(index, queries.values.data(), queries.rows, k, 64, 255, ids.data(),
                              dists.data(), &error),
            TSDG_OK)
      << error.message;
  EXPECT_GE(recall_of(ids, exact_ids(data, queries, k), k), 0.95);
  EXPECT_GT(tsdg_index_memory_bytes(index), 0u);
  // One query at a time (the calling thread) gives the same answer.
  std::vector<uint32_t> one(k);
  ASSERT_EQ(tsdg_index_search(index, queries.row(7), 1, k, 64, 255, one.data(), dists.data(),
                              &error),
            TSDG_OK);
  EXPECT_TRUE(std::equal(one.begin(), one.end(), ids.begin() + 7 * k));
  tsdg_index_free(index);
}

// The merge's unreached rows, found on threads of their own while the
// caller goes on, are the resident index's own, from the same entry points;
// a job cannot start on rows out of range.
TEST(CApi, UnreachedRowsJob) {
  const SyntheticSpec spec = small_clustered_spec(8000, 24, 10, 31);
  const Matrix data = make_clustered(spec);
  const TsdgBuildParams params = small_params();
  const Built b = build(data, params);
  TsdgError error;
  std::vector<uint32_t> entries(256);
  ASSERT_EQ(tsdg_select_entry_points(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                     b.neighbors.data(), params.degree, 256, entries.data(), &error),
            TSDG_OK);
  // the set the scans start from: these, then the strided nodes
  std::vector<uint32_t> navigating(256 + TSDG_MAX_STRIDED_ENTRIES);
  const int navigating_count = tsdg_navigating_set(entries.data(), 256, data.rows, navigating.data());
  ASSERT_GT(navigating_count, 256);  // 8000 rows: nodes 0, 256, ..., 7936 unless selected
  ASSERT_LE(navigating_count, 256 + 32);
  EXPECT_TRUE(std::equal(entries.begin(), entries.end(), navigating.begin()));
  TsdgUnreachedJob* job = tsdg_unreached_job_start(
      data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, b.neighbors.data(), b.lambdas.data(),
      params.degree, navigating.data(), navigating_count, nullptr, nullptr, 6000, nullptr, 2, 255, kAllRecords, &error);
  ASSERT_NE(job, nullptr) << error.message;
  std::vector<uint32_t> rows(2000);
  int64_t count = -1;
  ASSERT_EQ(tsdg_unreached_job_finish(job, rows.data(), 3, &count, &error), TSDG_OK) << error.message;

  TsdgResidentIndex* index =
      tsdg_index_upload(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                        b.neighbors.data(), b.lambdas.data(), params.degree, &error);
  ASSERT_NE(index, nullptr) << error.message;
  std::vector<uint32_t> own(2000);
  int64_t own_count = -1;
  ASSERT_EQ(tsdg_index_unreached_rows(index, 6000, 2, 255, own.data(), 2000, &own_count, &error),
            TSDG_OK);
  tsdg_index_free(index);
  EXPECT_GT(count, 3);
  EXPECT_EQ(count, own_count);
  EXPECT_TRUE(std::equal(rows.begin(), rows.begin() + 3, own.begin()));

  job = tsdg_unreached_job_start(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                 b.neighbors.data(), b.lambdas.data(), params.degree,
                                 entries.data(), 256, nullptr, nullptr, data.rows + 1, nullptr, 2, 255, kAllRecords, &error);
  EXPECT_EQ(job, nullptr);
  EXPECT_NE(std::string(error.message).find("out of range"), std::string::npos) << error.message;
}

// Orphans rows: every edge into them dropped from every list, as merges can
// leave an old row.
void drop_edges_into(Built& b, int degree, const std::vector<uint32_t>& rows) {
  const int64_t nodes = static_cast<int64_t>(b.neighbors.size()) / degree;
  for (int64_t u = 0; u < nodes; ++u) {
    uint32_t* list = &b.neighbors[u * degree];
    uint8_t* lambdas = &b.lambdas[u * degree];
    int kept = 0;
    for (int j = 0; j < degree; ++j) {
      if (std::find(rows.begin(), rows.end(), list[j]) != rows.end()) continue;
      list[kept] = list[j];
      lambdas[kept++] = lambdas[j];
    }
    for (; kept < degree; ++kept) {
      list[kept] = TSDG_INVALID_ID;
      lambdas[kept] = 0;
    }
  }
}

// The rows a merge marks TSDG_CHANGED_RECHECK are checked besides
// [first, n), by a job (and repaired) and by a resident index's repair: an
// old row no list points to any more is reported, or given an edge, only
// when it is marked.
TEST(CApi, UnreachedChecksTakeTheMarkedOldRows) {
  const SyntheticSpec spec = small_clustered_spec(6000, 24, 10, 37);
  const Matrix data = make_clustered(spec);
  const TsdgBuildParams params = small_params();
  Built b = build(data, params);
  TsdgError error;
  std::vector<uint32_t> entries(8);
  ASSERT_EQ(tsdg_select_entry_points(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                     b.neighbors.data(), params.degree, 8, entries.data(), &error),
            TSDG_OK);
  std::vector<uint32_t> orphans;
  for (uint32_t row = 100; orphans.size() < 3; row += 977) {
    if (std::find(entries.begin(), entries.end(), row) == entries.end()) orphans.push_back(row);
  }
  drop_edges_into(b, params.degree, orphans);
  const int64_t first = 5000;
  std::vector<uint8_t> marks(data.rows, 0);
  for (uint32_t row : orphans) marks[row] = TSDG_CHANGED_RECHECK;
  const auto reported = [&](const uint8_t* recheck) {
    TsdgUnreachedJob* job = tsdg_unreached_job_start(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                                     b.neighbors.data(), b.lambdas.data(), params.degree,
                                                     entries.data(), 8, nullptr, nullptr, first, recheck, 64, 255, kAllRecords, &error);
    EXPECT_NE(job, nullptr) << error.message;
    std::vector<uint32_t> rows(data.rows);
    int64_t count = -1;
    EXPECT_EQ(tsdg_unreached_job_finish(job, rows.data(), rows.size(), &count, &error), TSDG_OK);
    rows.resize(std::max<int64_t>(count, 0));
    return rows;
  };
  const std::vector<uint32_t> unmarked = reported(nullptr);
  const std::vector<uint32_t> marked = reported(marks.data());
  for (uint32_t row : orphans) {
    EXPECT_FALSE(std::binary_search(unmarked.begin(), unmarked.end(), row)) << "row " << row;
    EXPECT_TRUE(std::binary_search(marked.begin(), marked.end(), row)) << "row " << row;
  }

  // the repairs give each marked orphan an edge, so that it is reached
  for (const bool resident : {false, true}) {
    Built repaired = b;
    std::vector<uint8_t> changed = marks;
    std::vector<uint32_t> rows(data.rows);
    int64_t count = -1, lists = -1, found = -1;
    if (resident) {
      TsdgResidentIndex* index =
          tsdg_index_upload(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                            repaired.neighbors.data(), repaired.lambdas.data(), params.degree, &error);
      ASSERT_NE(index, nullptr) << error.message;
      ASSERT_EQ(tsdg_index_unreached_rows_repaired(index, data.values.data(), repaired.neighbors.data(),
                                                   repaired.lambdas.data(), params.degree, TSDG_METRIC_L2, first, 64,
                                                   255, rows.data(), rows.size(), &count, &found, changed.data(),
                                                   &lists, &error),
                TSDG_OK)
          << error.message;
      tsdg_index_free(index);
      EXPECT_GE(found, static_cast<int64_t>(orphans.size()));
    } else {
      TsdgUnreachedJob* job = tsdg_unreached_job_start(
          data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, repaired.neighbors.data(), repaired.lambdas.data(),
          params.degree, entries.data(), 8, nullptr, nullptr, first, marks.data(), 64, 255, kAllRecords, &error);
      ASSERT_NE(job, nullptr) << error.message;
      ASSERT_EQ(tsdg_unreached_job_finish_repairing(job, repaired.neighbors.data(), repaired.lambdas.data(),
                                                    params.degree, changed.data(), rows.data(), rows.size(), &count,
                                                    &lists, &error),
                TSDG_OK)
          << error.message;
    }
    rows.resize(count);
    EXPECT_GE(lists, static_cast<int64_t>(orphans.size())) << (resident ? "resident" : "job");
    for (uint32_t row : orphans) {
      EXPECT_FALSE(std::binary_search(rows.begin(), rows.end(), row)) << "row " << row;
      const bool pointed_to = std::find(repaired.neighbors.begin(), repaired.neighbors.end(), row) !=
                              repaired.neighbors.end();
      EXPECT_TRUE(pointed_to) << "row " << row << (resident ? " (resident)" : " (job)");
    }
  }
}

// A job's repair at an ef wider than kRepairNarrowEf also repairs the rows
// a search at that narrow ef misses: both checks on the repaired graph then
// miss few rows, and the rows it reports are a full check's at its ef; with
// room for every walk's record, for none, and for some.
class UnreachedRowsJobRecords : public ::testing::TestWithParam<int64_t> {};

INSTANTIATE_TEST_SUITE_P(RecordBytes, UnreachedRowsJobRecords, ::testing::Values(kAllRecords, 0, 64 << 10));

TEST_P(UnreachedRowsJobRecords, RepairsAtTheNarrowEfToo) {
  const SyntheticSpec spec = small_clustered_spec(8000, 24, 10, 31);
  const Matrix data = make_clustered(spec);
  // Short lists, so that the narrow search misses enough rows to repair.
  TsdgBuildParams params = small_params();
  params.degree = 8;
  Built b = build(data, params);
  TsdgError error;
  std::vector<uint32_t> entries(4);
  ASSERT_EQ(tsdg_select_entry_points(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                     b.neighbors.data(), params.degree, 4, entries.data(), &error),
            TSDG_OK);
  const int64_t first = 6000;
  const int wide_ef = 3 * tsdg::kRepairNarrowEf;
  const auto unreached_at = [&](int ef) {
    TsdgUnreachedJob* job = tsdg_unreached_job_start(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                                     b.neighbors.data(), b.lambdas.data(), params.degree,
                                                     entries.data(), 4, nullptr, nullptr, first, nullptr, ef, 255, kAllRecords, &error);
    EXPECT_NE(job, nullptr) << error.message;
    std::vector<uint32_t> rows(data.rows - first);
    int64_t count = -1;
    EXPECT_EQ(tsdg_unreached_job_finish(job, rows.data(), rows.size(), &count, &error), TSDG_OK);
    rows.resize(std::max<int64_t>(count, 0));
    return rows;
  };
  const size_t narrow_before = unreached_at(tsdg::kRepairNarrowEf).size();
  ASSERT_GT(narrow_before, 20u);

  TsdgUnreachedJob* job = tsdg_unreached_job_start(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                                   b.neighbors.data(), b.lambdas.data(), params.degree,
                                                   entries.data(), 4, nullptr, nullptr, first, nullptr, wide_ef, 255, GetParam(), &error);
  ASSERT_NE(job, nullptr) << error.message;
  std::vector<uint8_t> changed(data.rows, 0);
  std::vector<uint32_t> rows(data.rows);
  int64_t count = -1, lists = -1;
  ASSERT_EQ(tsdg_unreached_job_finish_repairing(job, b.neighbors.data(), b.lambdas.data(), params.degree,
                                                changed.data(), rows.data(), rows.size(), &count, &lists, &error),
            TSDG_OK)
      << error.message;
  rows.resize(count);
  EXPECT_EQ(rows, unreached_at(wide_ef));
  EXPECT_GE(lists, static_cast<int64_t>(narrow_before) / 2);
  EXPECT_LT(unreached_at(tsdg::kRepairNarrowEf).size() * 4, narrow_before);
}

// A resident index's repair leaves fewer of its rows unreached, those its
// own check finds on the repaired lists, and marks the lists it changed.
TEST(CApi, ResidentIndexRepairsUnreachedRows) {
  const SyntheticSpec spec = small_clustered_spec(8000, 24, 10, 31);
  const Matrix data = make_clustered(spec);
  // Short lists, so that the narrow search misses enough rows to repair.
  TsdgBuildParams params = small_params();
  params.degree = 8;
  Built b = build(data, params);
  const std::vector<uint32_t> original = b.neighbors;
  TsdgError error;
  TsdgResidentIndex* index = tsdg_index_upload(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                               b.neighbors.data(), b.lambdas.data(), params.degree, &error);
  ASSERT_NE(index, nullptr) << error.message;
  const int64_t first = 6000;
  std::vector<uint32_t> rows(data.rows);
  int64_t before = -1;
  ASSERT_EQ(tsdg_index_unreached_rows(index, first, 2, 255, rows.data(), rows.size(), &before, &error), TSDG_OK);
  ASSERT_GT(before, 5);
  std::vector<uint8_t> changed(data.rows, 0);
  int64_t count = -1, found = -1, lists = -1;
  ASSERT_EQ(tsdg_index_unreached_rows_repaired(index, data.values.data(), b.neighbors.data(), b.lambdas.data(),
                                               params.degree, TSDG_METRIC_L2, first, 2, 255, rows.data(),
                                               rows.size(), &count, &found, changed.data(), &lists, &error),
            TSDG_OK)
      << error.message;
  EXPECT_EQ(found, before);
  EXPECT_LT(count * 2, before);
  EXPECT_GT(lists, 0);
  std::vector<uint32_t> again(data.rows - first);
  int64_t again_count = -1;
  ASSERT_EQ(tsdg_index_unreached_rows(index, first, 2, 255, again.data(), again.size(), &again_count, &error),
            TSDG_OK);
  // past the rows checked, those whose edge a repair edge displaced, still
  // not reached
  rows.resize(count);
  again.resize(again_count);
  const auto checked = std::lower_bound(rows.begin(), rows.end(), static_cast<uint32_t>(first));
  EXPECT_EQ(std::vector<uint32_t>(checked, rows.end()), again);
  std::vector<uint32_t> everywhere(data.rows);
  int64_t everywhere_count = -1;
  ASSERT_EQ(tsdg_index_unreached_rows(index, 0, 2, 255, everywhere.data(), everywhere.size(), &everywhere_count,
                                      &error),
            TSDG_OK);
  everywhere.resize(everywhere_count);
  for (auto row = rows.begin(); row != checked; ++row) {
    EXPECT_TRUE(std::binary_search(everywhere.begin(), everywhere.end(), *row)) << "row " << *row;
  }
  int64_t marked = 0;
  for (int64_t u = 0; u < data.rows; ++u) {
    const bool differs = !std::equal(original.begin() + u * params.degree, original.begin() + (u + 1) * params.degree,
                                     b.neighbors.begin() + u * params.degree);
    marked += changed[u] != 0;
    if (differs) {
      EXPECT_EQ(changed[u], TSDG_CHANGED_GRAPH | TSDG_CHANGED_REPAIR) << "node " << u;
    }
  }
  EXPECT_EQ(marked, lists);
  tsdg_index_free(index);
}

TEST(CApi, IncrementalSearchFromEntryPoints) {
  const SyntheticSpec spec = small_clustered_spec(3000, 16, 8, 41);
  const Matrix data = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 50, 6);
  const TsdgBuildParams params = small_params();
  const Built b = build(data, params);
  TsdgError error;
  uint32_t entries[8];
  ASSERT_EQ(tsdg_select_entry_points(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                     b.neighbors.data(), params.degree, 8, entries, &error),
            TSDG_OK)
      << error.message;
  float nn1 = -1.0f;
  ASSERT_EQ(tsdg_graph_nn1_bound(data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                 b.neighbors.data(), params.degree, &nn1, &error),
            TSDG_OK);
  EXPECT_GT(nn1, 0.0f);

  const int k = 10;
  TsdgSearch* search = tsdg_search_create(255, 0.0f, &error);
  ASSERT_NE(search, nullptr);
  std::vector<uint32_t> found(queries.rows * k);
  std::vector<float> dists(k);
  std::vector<uint32_t> fresh(params.degree);
  for (int64_t q = 0; q < queries.rows; ++q) {
    const float* query = queries.row(q);
    tsdg_search_begin(search, 40);
    for (uint32_t e : entries) {
      tsdg_search_offer(search, e, tsdg_metric_distance(TSDG_METRIC_L2, query, data.row(e), data.dim));
    }
    uint32_t node;
    while ((node = tsdg_search_next(search)) != TSDG_INVALID_ID) {
      const int m = tsdg_search_unvisited(search, &b.neighbors[node * params.degree],
                                          &b.lambdas[node * params.degree], params.degree,
                                          fresh.data());
      for (int i = 0; i < m; ++i) {
        tsdg_search_offer(search, fresh[i],
                          tsdg_metric_distance(TSDG_METRIC_L2, query, data.row(fresh[i]), data.dim));
      }
    }
    ASSERT_EQ(tsdg_search_results(search, &found[q * k], dists.data(), k), k);
    EXPECT_GT(tsdg_search_distance_count(search), 8);
    // every distance offered was a candidate: each is in the pool or kept
    // for a wider round, and each id in the visited set
    EXPECT_GE(tsdg_search_memory_bytes(search),
              static_cast<size_t>(tsdg_search_distance_count(search)) * (sizeof(float) + 2 * sizeof(uint32_t)));
  }
  EXPECT_EQ(tsdg_search_status(search, &error), TSDG_OK);
  tsdg_search_free(search);
  EXPECT_GE(recall_of(found, exact_ids(data, queries, k), k), 0.95);
}

// Merges n_new rows into a graph of the first n_old rows of a clustered set
// and checks the merged k-NN lists against the exact ones.
void check_merge(int64_t n_old, int64_t n_new) {
  const SyntheticSpec spec = small_clustered_spec(n_old + n_new, 16, 8, 51);
  const Matrix data = make_clustered(spec);
  const TsdgBuildParams params = small_params();
  Matrix old_rows(n_old, data.dim);
  std::copy(data.values.begin(), data.values.begin() + n_old * data.dim, old_rows.values.begin());
  const Built old_graph = build(old_rows, params);
  Built merged;
  merged.knn_ids.resize(data.rows * params.build_k);
  merged.knn_dists.resize(merged.knn_ids.size());
  merged.neighbors.resize(data.rows * params.degree);
  merged.lambdas.resize(merged.neighbors.size());
  TsdgError error;
  ASSERT_EQ(tsdg_merge_graph(nullptr, data.values.data(), n_old, n_new, data.dim, TSDG_METRIC_L2,
                             &params, old_graph.knn_ids.data(), old_graph.knn_dists.data(),
                             merged.knn_ids.data(), merged.knn_dists.data(),
                             merged.neighbors.data(), merged.lambdas.data(), nullptr, nullptr,
                             &error),
            TSDG_OK)
      << error.message;
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, RunControl{});
  std::vector<uint32_t> merged_top(data.rows * 10);
  for (int64_t i = 0; i < data.rows; ++i) {
    std::copy_n(&merged.knn_ids[i * params.build_k], 10, &merged_top[i * 10]);
  }
  EXPECT_GE(recall_of(merged_top, std::vector<uint32_t>(exact.ids.begin(), exact.ids.end()), 10), 0.9);
  // The new rows are reachable: old nodes link to them.
  int64_t links_to_new = 0;
  for (int64_t i = 0; i < n_old * params.degree; ++i) {
    links_to_new += merged.neighbors[i] != TSDG_INVALID_ID && merged.neighbors[i] >= n_old;
  }
  EXPECT_GE(links_to_new, n_new);
}

TEST(CApi, MergeMatchesTheExactGraph) { check_merge(6000, 1000); }

// Fewer new rows than k: the new side's graph is padded.
TEST(CApi, MergeOfAFewRows) { check_merge(6000, 7); }

// An index keeps only the ids of its k-NN lists: a merge without the old
// distances (and without the merged ones) computes the graph it computes
// with the distances given.
TEST(CApi, MergeWithoutDistancesComputesThem) {
  const int64_t n_old = 6000, n_new = 600;
  const SyntheticSpec spec = small_clustered_spec(n_old + n_new, 16, 8, 52);
  const Matrix data = make_clustered(spec);
  const TsdgBuildParams params = small_params();
  Matrix old_rows(n_old, data.dim);
  std::copy(data.values.begin(), data.values.begin() + n_old * data.dim, old_rows.values.begin());
  Built old_graph = build(old_rows, params);
  for (int64_t i = 0; i < n_old * params.build_k; ++i) {
    const uint32_t v = old_graph.knn_ids[i];
    old_graph.knn_dists[i] = v == TSDG_INVALID_ID ? INFINITY
                             : tsdg_metric_distance(TSDG_METRIC_L2, data.row(i / params.build_k),
                                                    data.row(v), data.dim);
  }
  Built with, without;
  for (Built* b : {&with, &without}) {
    b->knn_ids.resize(data.rows * params.build_k);
    b->neighbors.resize(data.rows * params.degree);
    b->lambdas.resize(b->neighbors.size());
  }
  with.knn_dists.resize(with.knn_ids.size());
  TsdgError error;
  ASSERT_EQ(tsdg_merge_graph(nullptr, data.values.data(), n_old, n_new, data.dim, TSDG_METRIC_L2,
                             &params, old_graph.knn_ids.data(), old_graph.knn_dists.data(),
                             with.knn_ids.data(), with.knn_dists.data(), with.neighbors.data(),
                             with.lambdas.data(), nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  ASSERT_EQ(tsdg_merge_graph(nullptr, data.values.data(), n_old, n_new, data.dim, TSDG_METRIC_L2,
                             &params, old_graph.knn_ids.data(), nullptr, without.knn_ids.data(),
                             nullptr, without.neighbors.data(), without.lambdas.data(), nullptr,
                             nullptr, &error),
            TSDG_OK)
      << error.message;
  EXPECT_EQ(with.knn_ids, without.knn_ids);
  EXPECT_EQ(with.neighbors, without.neighbors);
  EXPECT_EQ(with.lambdas, without.lambdas);
}

bool cancel_at_once(void* arg, TsdgBuildPhase phase, int64_t, int64_t) {
  *static_cast<int*>(arg) = phase;
  return true;
}

// The layer's bytes: none without a layer, and per layer node its row among them.
TEST(CApi, LayerBytesCountEachLayerNode) {
  TsdgBuildParams params;
  tsdg_build_params_default(&params);
  EXPECT_EQ(tsdg_layer_bytes(TSDG_LAYER_MIN_NODES - 1, 64, &params), 0u);
  const size_t layer = tsdg_layer_bytes(TSDG_LAYER_MIN_NODES, 64, &params);
  EXPECT_GT(layer, 0u);
  EXPECT_EQ(tsdg_layer_bytes(2 * TSDG_LAYER_MIN_NODES, 64, &params), 2 * layer);
  EXPECT_EQ(tsdg_layer_bytes(TSDG_LAYER_MIN_NODES, 128, &params) - layer,
            static_cast<size_t>(tsdg_layer_node_count(TSDG_LAYER_MIN_NODES)) * 64 * sizeof(float));
}

// The layer a build with its layer writes is the one tsdg_build_layer
// builds, and the graph is the plain build's: the caller need not build the
// layer again.
TEST(CApi, BuildWithLayerWritesTheLayerTsdgBuildLayerBuilds) {
  const Matrix data = make_clustered(small_clustered_spec(TSDG_LAYER_MIN_NODES + 4000, 16, 40, 71));
  const TsdgBuildParams params = small_params();
  const int64_t layer_nodes = tsdg_layer_node_count(data.rows);
  ASSERT_GT(layer_nodes, 0);
  const Built plain = build(data, params);
  std::vector<uint32_t> neighbors(plain.neighbors.size());
  std::vector<uint8_t> lambdas(neighbors.size());
  std::vector<uint32_t> layer_ids(static_cast<size_t>(layer_nodes) * params.degree);
  std::vector<uint8_t> layer_lambdas(layer_ids.size());
  TsdgError error;
  ASSERT_EQ(tsdg_build_graph_with_layer(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, &params,
                                        neighbors.data(), lambdas.data(), nullptr, nullptr, layer_ids.data(),
                                        layer_lambdas.data(), nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  EXPECT_EQ(neighbors, plain.neighbors);
  EXPECT_EQ(lambdas, plain.lambdas);
  expect_layer_of(data, params, layer_ids, layer_lambdas);
  EXPECT_EQ(tsdg_build_graph_with_layer(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, &params,
                                        neighbors.data(), lambdas.data(), nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
}

TEST(CApi, PollCancelsABuild) {
  const Matrix data = make_clustered(small_clustered_spec(60000, 64, 16, 61));
  TsdgBuildParams params = small_params();
  std::vector<uint32_t> neighbors(data.rows * params.degree);
  std::vector<uint8_t> lambdas(neighbors.size());
  int phase = 0;
  TsdgError error;
  const TsdgStatus status = tsdg_build_graph(
      nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, &params, neighbors.data(),
      lambdas.data(), nullptr, nullptr, cancel_at_once, &phase, &error);
  EXPECT_EQ(status, TSDG_ERR_CANCELLED) << error.message;
  EXPECT_EQ(phase, TSDG_PHASE_KNN_GRAPH);
}

// What the poll of a marked build sees in the caller's arrays: the k-NN
// lists once the phase is past TSDG_PHASE_KNN_GRAPH, the search lists once
// TSDG_PHASE_LINK counts every row.
struct MarkedBuildPoll {
  const Built* out = nullptr;
  int64_t rows = 0;
  std::vector<uint32_t> knn_past_gnnd;
  std::vector<uint32_t> lists_at_link;
  std::vector<uint8_t> lambdas_at_link;
};

bool snapshot_marked_build(void* arg, TsdgBuildPhase phase, int64_t done, int64_t) {
  auto* poll = static_cast<MarkedBuildPoll*>(arg);
  if (phase != TSDG_PHASE_KNN_GRAPH && poll->knn_past_gnnd.empty()) poll->knn_past_gnnd = poll->out->knn_ids;
  if (phase == TSDG_PHASE_LINK && done == poll->rows && poll->lists_at_link.empty()) {
    poll->lists_at_link = poll->out->neighbors;
    poll->lambdas_at_link = poll->out->lambdas;
  }
  return false;
}

TEST(CApi, MarkedBuildPublishesItsListsBeforeItsCheck) {
  const Matrix data = make_clustered(small_clustered_spec(20000, 32, 40, 67));
  const TsdgBuildParams params = small_params();
  const Built plain = build(data, params);
  Built marked;
  marked.neighbors.resize(plain.neighbors.size());
  marked.lambdas.resize(plain.lambdas.size());
  marked.knn_ids.resize(plain.knn_ids.size());
  std::vector<uint8_t> changed(data.rows, 0xff);
  MarkedBuildPoll poll;
  poll.out = &marked;
  poll.rows = data.rows;
  const int64_t layer_nodes = tsdg_layer_node_count(data.rows);
  ASSERT_GT(layer_nodes, 0);
  std::vector<uint32_t> layer_ids(static_cast<size_t>(layer_nodes) * params.degree);
  std::vector<uint8_t> layer_lambdas(layer_ids.size());
  TsdgError error;
  ASSERT_EQ(tsdg_build_graph_marked(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                    &params, marked.neighbors.data(), marked.lambdas.data(),
                                    marked.knn_ids.data(), nullptr, changed.data(), layer_ids.data(),
                                    layer_lambdas.data(), snapshot_marked_build, &poll, &error),
            TSDG_OK)
      << error.message;
  // the layer its check walked from is tsdg_build_layer's
  expect_layer_of(data, params, layer_ids, layer_lambdas);
  // the same graph as the unmarked build's (the CPU's is the same for a seed and a thread count)
  EXPECT_EQ(marked.neighbors, plain.neighbors);
  EXPECT_EQ(marked.lambdas, plain.lambdas);
  EXPECT_EQ(marked.knn_ids, plain.knn_ids);
  EXPECT_EQ(poll.knn_past_gnnd, plain.knn_ids) << "the k-NN lists were not final when GNND ended";
  ASSERT_FALSE(poll.lists_at_link.empty()) << "no poll saw every search list out";
  int64_t marked_lists = 0;
  for (int64_t u = 0; u < data.rows; ++u) {
    ASSERT_TRUE(changed[u] == 0 || changed[u] == TSDG_CHANGED_LINK) << "row " << u;
    marked_lists += changed[u] != 0;
    const auto list = [&](const auto& values) {
      return std::vector<int64_t>(values.begin() + u * params.degree, values.begin() + (u + 1) * params.degree);
    };
    if (list(poll.lists_at_link) != list(marked.neighbors) || list(poll.lambdas_at_link) != list(marked.lambdas)) {
      ASSERT_EQ(changed[u], TSDG_CHANGED_LINK) << "row " << u << " changed after the poll saw it, unmarked";
    }
  }
  // the check links rows of these clusters: the marks are not vacuous
  EXPECT_GT(marked_lists, 0);
  EXPECT_EQ(tsdg_build_graph_marked(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                    &params, marked.neighbors.data(), marked.lambdas.data(), nullptr,
                                    nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_build_graph_marked(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2,
                                    &params, marked.neighbors.data(), marked.lambdas.data(), nullptr,
                                    nullptr, changed.data(), layer_ids.data(), nullptr, nullptr, nullptr,
                                    &error),
            TSDG_ERR_INVALID_ARGUMENT);
}

TEST(CApi, BadInputIsReportedNotThrown) {
  const float rows[4] = {0, 1, 2, 3};
  TsdgBuildParams params = small_params();
  uint32_t neighbors[64];
  uint8_t lambdas[64];
  TsdgError error;
  EXPECT_EQ(tsdg_build_graph(nullptr, rows, 2, 0, TSDG_METRIC_L2, &params, neighbors, lambdas,
                             nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_GT(std::strlen(error.message), 0u);
  EXPECT_EQ(tsdg_build_graph(nullptr, rows, 2, 2, static_cast<TsdgMetric>(4), &params, neighbors,
                             lambdas, nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_build_graph(nullptr, nullptr, 2, 2, TSDG_METRIC_L2, &params, neighbors, lambdas,
                             nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  // the CPU builds in host memory: it lacks no device memory, for any shape
  EXPECT_EQ(tsdg_build_device_shortfall(nullptr, int64_t{1} << 30, 2000, &params), 0u);
  params.degree = 0;
  EXPECT_EQ(tsdg_build_graph(nullptr, rows, 2, 2, TSDG_METRIC_L2, &params, neighbors, lambdas,
                             nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tsdg_build_device_shortfall(nullptr, 1000, 2, &params), 0u);
  EXPECT_EQ(tsdg_search_create(-1, 0.0f, &error), nullptr);
  EXPECT_EQ(tsdg_search_create(10, -1.0f, &error), nullptr);
  EXPECT_EQ(tsdg_backend_load("/nonexistent/pg_tsdg_cuda.so", 0, &error), nullptr);
  EXPECT_GT(std::strlen(error.message), 0u);
  EXPECT_STREQ(tsdg_backend_name(nullptr), "cpu");

  // Neighbor ids out of range (corrupt pages) are refused at upload.
  std::fill(std::begin(neighbors), std::end(neighbors), 99u);
  std::fill(std::begin(lambdas), std::end(lambdas), 0);
  EXPECT_EQ(tsdg_index_upload(nullptr, rows, 2, 2, TSDG_METRIC_L2, neighbors, lambdas, 4, &error),
            nullptr);
  EXPECT_NE(std::strstr(error.message, "out of range"), nullptr) << error.message;
}

TEST(CApi, TinyIndexesWork) {
  // Fewer rows than k: the graph is exact and padded.
  const float rows[6] = {0, 0, 1, 0, 5, 5};
  TsdgBuildParams params = small_params();
  std::vector<uint32_t> neighbors(3 * params.degree);
  std::vector<uint8_t> lambdas(neighbors.size());
  TsdgError error;
  ASSERT_EQ(tsdg_build_graph(nullptr, rows, 3, 2, TSDG_METRIC_L2, &params, neighbors.data(),
                             lambdas.data(), nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  TsdgResidentIndex* index = tsdg_index_upload(nullptr, rows, 3, 2, TSDG_METRIC_L2,
                                               neighbors.data(), lambdas.data(), params.degree,
                                               &error);
  ASSERT_NE(index, nullptr) << error.message;
  const float query[2] = {4.5f, 4.0f};
  uint32_t ids[5];
  float dists[5];
  ASSERT_EQ(tsdg_index_search(index, query, 1, 5, 10, 255, ids, dists, &error), TSDG_OK);
  EXPECT_EQ(ids[0], 2u);
  EXPECT_EQ(ids[1], 1u);
  EXPECT_EQ(ids[2], 0u);
  EXPECT_EQ(ids[3], TSDG_INVALID_ID);
  EXPECT_TRUE(std::isinf(dists[4]));
  EXPECT_EQ(tsdg_index_search(index, query, 1, 0, 10, 255, ids, dists, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  tsdg_index_free(index);
}

}  // namespace
}  // namespace tsdg
