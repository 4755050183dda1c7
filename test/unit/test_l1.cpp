// An L1 index (vector_l1_ops) on the CPU, through the C interface as the
// extension calls it: built on hard data (many clusters, each on its own
// random 16-dim subspace, overlapping), searched, and merged batch by batch,
// its recall@10 against exact L1 answers computed here the slow, obvious way;
// and only a backend that computes L1 takes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backend.h"
#include "recall.h"
#include "synthetic.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

constexpr int kK = 10;

SyntheticSpec hard_spec() {
  SyntheticSpec spec;
  spec.rows = 12000;
  spec.dim = 48;
  spec.clusters = 60;
  spec.intrinsic_dim = 16;
  spec.spread = 1.0f;
  spec.noise = 0.05f;
  spec.absolute_scale = true;
  spec.seed = 17;
  return spec;
}

// The k nearest rows of the first n rows of data by L1, summed in double.
std::vector<uint32_t> naive_l1_truth(const Matrix& data, int64_t n, const Matrix& queries) {
  std::vector<uint32_t> truth(queries.rows * kK);
  std::vector<std::pair<double, uint32_t>> all(n);
  for (int64_t q = 0; q < queries.rows; ++q) {
    for (int64_t i = 0; i < n; ++i) {
      double d = 0.0;
      for (int j = 0; j < data.dim; ++j) d += std::fabs(double(queries.row(q)[j]) - data.row(i)[j]);
      all[i] = {d, static_cast<uint32_t>(i)};
    }
    std::partial_sort(all.begin(), all.begin() + kK, all.end());
    for (int j = 0; j < kK; ++j) truth[q * kK + j] = all[j].second;
  }
  return truth;
}

struct Graph {
  std::vector<uint32_t> neighbors, knn;
  std::vector<uint8_t> lambdas;
};

TsdgBuildParams index_params() {
  TsdgBuildParams params;
  tsdg_build_params_default(&params);
  params.threads = 2;
  return params;
}

Graph build(const Matrix& data, int64_t n, const TsdgBuildParams& params) {
  Graph g;
  g.neighbors.resize(n * params.degree);
  g.lambdas.resize(g.neighbors.size());
  g.knn.resize(n * params.build_k);
  TsdgError error;
  EXPECT_EQ(tsdg_build_graph(nullptr, data.values.data(), n, data.dim, TSDG_METRIC_L1, &params, g.neighbors.data(),
                             g.lambdas.data(), g.knn.data(), nullptr, nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  return g;
}

// recall@10 of the first n rows' graph at ef, and the distances it answers
// checked against the kernel's
double search_recall(const Matrix& data, int64_t n, const Graph& g, int degree, const Matrix& queries,
                     const std::vector<uint32_t>& truth, int ef) {
  TsdgError error;
  TsdgResidentIndex* index = tsdg_index_upload(nullptr, data.values.data(), n, data.dim, TSDG_METRIC_L1,
                                               g.neighbors.data(), g.lambdas.data(), degree, &error);
  EXPECT_NE(index, nullptr) << error.message;
  if (index == nullptr) return 0.0;
  std::vector<uint32_t> ids(queries.rows * kK);
  std::vector<float> dists(ids.size());
  EXPECT_EQ(tsdg_index_search(index, queries.values.data(), queries.rows, kK, ef, TSDG_LAMBDA_LIMIT_ALL, ids.data(),
                              dists.data(), &error),
            TSDG_OK)
      << error.message;
  tsdg_index_free(index);
  for (int64_t q = 0; q < queries.rows; q += 17) {
    EXPECT_EQ(dists[q * kK], tsdg_l1_distance(queries.row(q), data.row(ids[q * kK]), data.dim));
  }
  return recall_at(ids.data(), kK, truth.data(), kK, queries.rows, kK);
}

TEST(L1Index, BuildReachesExactL1AnswersOnHardData) {
  const SyntheticSpec spec = hard_spec();
  const Matrix data = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 200, 18);
  const std::vector<uint32_t> truth = naive_l1_truth(data, data.rows, queries);
  const TsdgBuildParams params = index_params();
  const Graph g = build(data, data.rows, params);
  EXPECT_GE(search_recall(data, data.rows, g, params.degree, queries, truth, 64), 0.95);

  // the same rows indexed by L2 answer other rows: L1's truth is its own
  TsdgError error;
  std::vector<uint32_t> l2_ids(queries.rows * kK);
  std::vector<float> l2_dists(l2_ids.size());
  ASSERT_EQ(tsdg_exact_knn(nullptr, data.values.data(), data.rows, queries.values.data(), queries.rows, data.dim,
                           TSDG_METRIC_L2, kK, l2_ids.data(), l2_dists.data(), &error),
            TSDG_OK);
  EXPECT_LT(recall_at(l2_ids.data(), kK, truth.data(), kK, queries.rows, kK), 0.95);
}

// the merges of the extension (tsdg_merge_graph_incremental) into an L1
// graph keep its recall
TEST(L1Index, MergedBatchesSearchAsTheBuild) {
  const SyntheticSpec spec = hard_spec();
  const Matrix data = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 200, 19);
  const std::vector<uint32_t> truth = naive_l1_truth(data, data.rows, queries);
  const TsdgBuildParams params = index_params();
  const int64_t first = 9000, batch = 1000;
  Graph g = build(data, first, params);
  TsdgError error;
  for (int64_t n_old = first; n_old < data.rows; n_old += batch) {
    const int64_t n = n_old + batch;
    Graph merged;
    merged.knn.resize(n * params.build_k);
    merged.neighbors.resize(n * params.degree);
    merged.lambdas.resize(merged.neighbors.size());
    std::vector<uint8_t> changed(n);
    ASSERT_EQ(tsdg_merge_graph_incremental(nullptr, data.values.data(), nullptr, nullptr, n_old, batch, data.dim,
                                           TSDG_METRIC_L1, &params, g.knn.data(), nullptr, g.neighbors.data(),
                                           g.lambdas.data(), nullptr, merged.knn.data(), nullptr,
                                           merged.neighbors.data(), merged.lambdas.data(), changed.data(), nullptr, nullptr, nullptr,
                                           nullptr, &error),
              TSDG_OK)
        << error.message;
    g = std::move(merged);
  }
  EXPECT_GE(search_recall(data, data.rows, g, params.degree, queries, truth, 64), 0.95);
}

TEST(L1Index, OnlyABackendThatComputesL1TakesIt) {
  EXPECT_TRUE(tsdg_backend_computes(nullptr, TSDG_METRIC_L1));
  EXPECT_TRUE(make_cpu_backend()->computes(Metric::L1));
  EXPECT_FALSE(tsdg_backend_computes(nullptr, static_cast<TsdgMetric>(4)));
}

}  // namespace
}  // namespace tsdg
