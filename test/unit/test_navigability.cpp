// Navigability on hard data: many clusters, each on its own random 16-dim
// subspace, with a navigating set far smaller than the cluster count (as at
// 1M rows, 2,000 clusters and the 256 selected entries) and no strided
// entries, so that the graph alone must route between clusters. A graph
// pruned from converged k-NN lists alone has no such routes; the long-range
// candidates (long_range.h) must give them, and a more accurate k-NN graph
// must not give a worse search graph. The strided entries of the index's
// navigating set must then only add recall.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include "backend.h"
#include "bruteforce.h"
#include "distance.h"
#include "diversify.h"
#include "gnnd.h"
#include "long_range.h"
#include "navigating_layer.h"
#include "search.h"
#include "synthetic.h"
#include "thread_pool.h"

namespace tsdg {
namespace {

constexpr int kK = 10;
constexpr int kEntries = 16;
const int kEfs[] = {64, 128, 256};

struct HardData {
  Matrix data;
  Matrix queries;
  std::vector<uint32_t> truth;
};

HardData hard_data(float spread, const RunControl& control, int64_t rows = 50000, int dim = 64, int clusters = 100,
                   int64_t queries = 200) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.dim = dim;
  spec.clusters = clusters;
  spec.intrinsic_dim = 16;
  spec.spread = spread;
  spec.noise = 0.05f;
  spec.absolute_scale = true;
  spec.seed = 5;
  HardData d;
  d.data = make_clustered(spec);
  d.queries = make_clustered_queries(spec, queries, 6);
  d.truth.resize(d.queries.rows * kK);
  std::vector<float> dists(d.truth.size());
  exact_knn(d.data.view(), d.queries.view(), Metric::L2, kK, d.truth.data(), dists.data(), control);
  return d;
}

// recall@10 of the k-NN graph's lists of the first rows (self excluded).
double knn_recall(const HardData& d, const KnnGraph& knn, const RunControl& control) {
  constexpr int64_t kRows = 500;
  const MatrixView rows{d.data.view().data, kRows, d.data.view().dim};
  std::vector<uint32_t> truth(kRows * (kK + 1));
  std::vector<float> dists(truth.size());
  exact_knn(d.data.view(), rows, Metric::L2, kK + 1, truth.data(), dists.data(), control);
  int64_t hits = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    std::vector<uint32_t> exact(truth.data() + r * (kK + 1), truth.data() + (r + 1) * (kK + 1));
    exact.erase(std::remove(exact.begin(), exact.end(), static_cast<uint32_t>(r)), exact.end());
    exact.resize(kK);
    const uint32_t* list = knn.list(r);
    for (int j = 0; j < kK; ++j) hits += std::count(exact.begin(), exact.end(), list[j]);
  }
  return static_cast<double>(hits) / static_cast<double>(kRows * kK);
}

// recall@10 of index's search of the queries at params.
double search_recall(const HardData& d, CpuSearchIndex& index, const SearchParams& params,
                     const RunControl& control) {
  std::vector<uint32_t> ids(d.queries.rows * kK);
  std::vector<float> dists(ids.size());
  index.search(d.queries.view(), params, ids.data(), dists.data(), control);
  int64_t hits = 0;
  for (int64_t q = 0; q < d.queries.rows; ++q) {
    const uint32_t* truth = d.truth.data() + q * kK;
    for (int j = 0; j < kK; ++j) hits += std::count(truth, truth + kK, ids[q * kK + j]);
  }
  return static_cast<double>(hits) / static_cast<double>(ids.size());
}

// recall@10 of the graph built from GNND with gnnd, at each of kEfs; the
// k-NN graph's own recall@10 into knn_recall_out when given.
std::vector<double> recalls(const HardData& d, const GnndParams& gnnd, const DiversifyParams& diversify,
                            const RunControl& control, int64_t entry_stride = 0,
                            double* knn_recall_out = nullptr) {
  const KnnGraph knn = gnnd_build(d.data.view(), Metric::L2, gnnd, control);
  if (knn_recall_out != nullptr) *knn_recall_out = knn_recall(d, knn, control);
  const TsdgGraph graph = diversify_tsdg(d.data.view(), Metric::L2, knn, diversify, control);
  CpuSearchIndex index(d.data.view(), GraphView::of(graph), Metric::L2);
  std::vector<double> out;
  for (int ef : kEfs) {
    SearchParams params;
    params.k = kK;
    params.ef = ef;
    params.entry_samples = kEntries;
    params.entry_stride = entry_stride;
    out.push_back(search_recall(d, index, params, control));
  }
  return out;
}

// The index's GNND in a build on the CPU: k-NN lists of 64
// (TSDG_DEFAULT_BUILD_K), a quarter of them sampled (tsdg_build_graph).
GnndParams index_gnnd() {
  GnndParams p;
  p.k = 64;
  p.samples = 16;
  return p;
}

// The index's GNND run on until its lists have converged.
GnndParams converged_gnnd() {
  GnndParams p = index_gnnd();
  p.iterations = 30;
  return p;
}

// A k-NN graph stopped short of convergence (its k-NN recall far lower).
GnndParams rough_gnnd() {
  GnndParams p = index_gnnd();
  p.samples = 8;
  p.iterations = 4;
  return p;
}

TEST(Navigability, OverlappingClustersReach099AndARougherKnnGraphIsNotBetter) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(1.0f, control);
  double knn_recall_by_default = 0;
  const std::vector<double> by_default =
      recalls(d, index_gnnd(), DiversifyParams{}, control, 0, &knn_recall_by_default);
  EXPECT_GE(*std::max_element(by_default.begin(), by_default.end()), 0.99);
  // GNND runs until it has converged, not until its iteration bound
  EXPECT_GE(knn_recall_by_default, 0.98);
  const std::vector<double> by_rough = recalls(d, rough_gnnd(), DiversifyParams{}, control);
  for (size_t i = 0; i < by_default.size(); ++i) {
    EXPECT_GE(by_default[i], by_rough[i] - 0.005) << "ef " << kEfs[i];
  }
}

TEST(Navigability, SeparatedClustersReach099AndStridedEntriesAddRecall) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(4.0f, control);
  const std::vector<double> by_default = recalls(d, index_gnnd(), DiversifyParams{}, control);
  EXPECT_GE(*std::max_element(by_default.begin(), by_default.end()), 0.99);
  const std::vector<double> strided = recalls(d, index_gnnd(), DiversifyParams{}, control, -1);
  for (size_t i = 0; i < by_default.size(); ++i) {
    EXPECT_GE(strided[i], by_default[i] - 0.005) << "ef " << kEfs[i];
  }
}

// recall@10 at each ef of efs of graph searched from the index's navigating
// set, or from its navigating layer.
std::vector<double> index_recalls(const HardData& d, const TsdgGraph& graph, bool layered,
                                  const std::vector<int>& efs, const RunControl& control) {
  CpuSearchIndex index(d.data.view(), GraphView::of(graph), Metric::L2);
  if (layered) {
    const std::unique_ptr<Backend> cpu = make_cpu_backend();
    const TsdgGraph layer = build_navigating_layer(*cpu, d.data.view(), Metric::L2, DiversifyParams{}, 1, control);
    EXPECT_EQ(layer.nodes, layer_node_count(d.data.rows));
    index.set_layer(GraphView::of(layer));
  }
  std::vector<double> out;
  for (int ef : efs) {
    SearchParams params;
    params.k = kK;
    params.ef = ef;
    out.push_back(search_recall(d, index, params, control));
  }
  return out;
}

// Clusters of 100 rows, more of them than the navigating set holds nodes
// (400 against 412, most clusters without one): a converged k-NN graph links
// each cluster to itself. From the layer (every 16th node, six a cluster)
// a search reaches the query's cluster, and the more accurate graph
// searches as well as the rougher one at every ef.
TEST(Navigability, FromTheLayerAConvergedKnnGraphSearchesAsWellAsARougherOne) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(1.0f, control, 40000, 128, 400, 2000);
  const std::vector<int> efs = {10, 16, 32, 64};
  GnndParams converged = converged_gnnd();
  converged.samples = 32;
  double converged_knn = 0;
  const KnnGraph accurate = gnnd_build(d.data.view(), Metric::L2, converged, control);
  converged_knn = knn_recall(d, accurate, control);
  EXPECT_GE(converged_knn, 0.99);
  const TsdgGraph accurate_graph = diversify_tsdg(d.data.view(), Metric::L2, accurate, DiversifyParams{}, control);
  const TsdgGraph rough_graph = diversify_tsdg(
      d.data.view(), Metric::L2, gnnd_build(d.data.view(), Metric::L2, index_gnnd(), control), DiversifyParams{},
      control);
  const std::vector<double> accurate_set = index_recalls(d, accurate_graph, false, efs, control);
  const std::vector<double> accurate_layer = index_recalls(d, accurate_graph, true, efs, control);
  const std::vector<double> rough_layer = index_recalls(d, rough_graph, true, efs, control);
  for (size_t i = 0; i < efs.size(); ++i) {
    std::printf("ef %d: converged from the set %.4f, from the layer %.4f; index GNND from the layer %.4f\n",
                efs[i], accurate_set[i], accurate_layer[i], rough_layer[i]);
    EXPECT_GE(accurate_layer[i], accurate_set[i]) << "ef " << efs[i];
    EXPECT_GE(accurate_layer[i], rough_layer[i] - 0.002) << "ef " << efs[i];
  }
  EXPECT_GE(accurate_layer.back(), 0.99);
}

// The layer's entries are nodes of the index's graph (every 16th), and an
// index takes only the layer of its own node count.
TEST(Navigability, TheLayerGivesEveryStridedNodeAndFitsOnlyItsGraph) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(1.0f, control, kLayerMinNodes + 100, 16, 40);
  EXPECT_EQ(layer_node_count(kLayerMinNodes - 1), 0);
  EXPECT_EQ(layer_node_count(d.data.rows), (d.data.rows + kLayerStride - 1) / kLayerStride);
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const TsdgGraph layer = build_navigating_layer(*cpu, d.data.view(), Metric::L2, DiversifyParams{}, 1, control);
  ASSERT_EQ(layer.nodes, layer_node_count(d.data.rows));
  for (uint32_t id : layer.neighbors) EXPECT_TRUE(id == kInvalidId || id < layer.nodes);
  const Matrix rows = gather_layer_rows(d.data.view());
  NavigatingLayer searchable(rows.view(), GraphView::of(layer), Metric::L2);
  const int ef = 10;
  const int width = NavigatingLayer::width(ef);
  std::vector<uint32_t> ids(d.queries.rows * width);
  std::vector<float> dists(ids.size());
  searchable.entries(d.queries.view(), ef, ids.data(), dists.data(), control);
  for (int64_t q = 0; q < d.queries.rows; ++q) {
    for (int j = 0; j < width; ++j) {
      const uint32_t id = ids[q * width + j];
      ASSERT_NE(id, kInvalidId);
      EXPECT_EQ(id % kLayerStride, 0u);
      EXPECT_FLOAT_EQ(dists[q * width + j], distance_kernels().l2_squared(d.queries.row(q), d.data.row(id), d.data.dim));
      if (j > 0) {
        EXPECT_LE(dists[q * width + j - 1], dists[q * width + j]);
      }
    }
  }
  const TsdgGraph graph = diversify_tsdg(d.data.view(), Metric::L2,
                                         gnnd_build(d.data.view(), Metric::L2, index_gnnd(), control),
                                         DiversifyParams{}, control);
  CpuSearchIndex index(d.data.view(), GraphView::of(graph), Metric::L2);
  GraphView short_layer = GraphView::of(layer);
  short_layer.nodes -= 1;
  EXPECT_THROW(index.set_layer(short_layer), Error);
  index.set_layer(GraphView::of(layer));
  index.set_layer(GraphView{});
}

// The rows a walk with the build check's pool misses, from the entries a
// search with default parameters takes: those layer's walk finds where
// layer is given, else the navigating set's.
int64_t rows_missed_by_narrow_walks(const HardData& d, const TsdgGraph& graph, const RunControl& control,
                                    const TsdgGraph* layer = nullptr) {
  CpuSearchIndex index(d.data.view(), GraphView::of(graph), Metric::L2);
  if (layer != nullptr) index.set_layer(GraphView::of(*layer));
  SearchParams params;
  params.ef = kBuildCheckEf;
  return static_cast<int64_t>(index.unreached_rows(0, d.data.rows, params, control).size());
}

TEST(Navigability, TheBuildCheckWalksFromTheLayerTheSearchesStartFrom) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(1.0f, control, 50000, 64, 500);
  const KnnGraph knn = gnnd_build(d.data.view(), Metric::L2, converged_gnnd(), control);
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const TsdgGraph layer = build_navigating_layer(*cpu, d.data.view(), Metric::L2, DiversifyParams{}, 1, control);
  ASSERT_GT(layer.nodes, 0);
  TsdgGraph from_set = diversify_tsdg(d.data.view(), Metric::L2, knn, DiversifyParams{}, control);
  TsdgGraph from_layer = from_set;
  link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, from_set, control);
  link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, GraphSpan::of(from_layer), control,
                                   kBuildCheckRows, {}, nullptr, nullptr, GraphView::of(layer));
  const int64_t missed_set_checked = rows_missed_by_narrow_walks(d, from_set, control, &layer);
  const int64_t missed_layer_checked = rows_missed_by_narrow_walks(d, from_layer, control, &layer);
  std::printf("rows narrow walks from the layer miss: checked from the set %lld, from the layer %lld\n",
              static_cast<long long>(missed_set_checked), static_cast<long long>(missed_layer_checked));
  ASSERT_GT(missed_set_checked, 0) << "the data must leave routes from the layer that a check from the set misses";
  EXPECT_LE(missed_layer_checked, missed_set_checked / 2);
}

TEST(Navigability, TheBuildCheckLinksTheRowsNarrowWalksMissOnAConvergedKnnGraph) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(1.0f, control);
  const KnnGraph knn = gnnd_build(d.data.view(), Metric::L2, converged_gnnd(), control);
  TsdgGraph graph = diversify_tsdg(d.data.view(), Metric::L2, knn, DiversifyParams{}, control);
  const int64_t missed_before = rows_missed_by_narrow_walks(d, graph, control);
  ASSERT_GT(missed_before, 0) << "the data must be hard enough for the check to have work";
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  const int64_t linked = link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, graph, control);
  EXPECT_GT(linked, 0);
  EXPECT_LE(linked, missed_before);
  EXPECT_LE(rows_missed_by_narrow_walks(d, graph, control), missed_before / 4);
  // past max_rows, every m-th row is checked: fewer links, and fewer misses than before
  TsdgGraph sampled = diversify_tsdg(d.data.view(), Metric::L2, knn, DiversifyParams{}, control);
  const int64_t linked_sampled =
      link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, sampled, control, d.data.rows / 4);
  EXPECT_GT(linked_sampled, 0);
  EXPECT_LT(linked_sampled, linked);
  EXPECT_LT(rows_missed_by_narrow_walks(d, sampled, control), missed_before);
  // only_rows: the check walks those rows alone (a merge's on the host)
  TsdgGraph partial = diversify_tsdg(d.data.view(), Metric::L2, knn, DiversifyParams{}, control);
  SearchParams narrow;
  narrow.ef = kBuildCheckEf;
  const std::vector<uint32_t> missed =
      CpuSearchIndex(d.data.view(), GraphView::of(partial), Metric::L2).unreached_rows(0, d.data.rows, narrow, control);
  const std::vector<uint32_t> none;
  const TsdgGraph unchecked = partial;
  EXPECT_EQ(link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, GraphSpan::of(partial), control,
                                             kBuildCheckRows, {}, nullptr, &none),
            0);
  EXPECT_EQ(partial.neighbors, unchecked.neighbors);
  const std::vector<uint32_t> half(missed.begin(), missed.begin() + static_cast<std::ptrdiff_t>(missed.size() / 2));
  const int64_t linked_half = link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, GraphSpan::of(partial),
                                                               control, kBuildCheckRows, {}, nullptr, &half);
  EXPECT_GT(linked_half, 0);
  EXPECT_LT(linked_half, linked);
  const std::vector<uint32_t> missed_after =
      CpuSearchIndex(d.data.view(), GraphView::of(partial), Metric::L2).unreached_rows(0, d.data.rows, narrow, control);
  const auto half_still_missed = std::count_if(half.begin(), half.end(), [&](uint32_t row) {
    return std::binary_search(missed_after.begin(), missed_after.end(), row);
  });
  EXPECT_LE(half_still_missed, static_cast<std::ptrdiff_t>(half.size() / 4));
  // under inner product a row need not answer its own vector: no check
  TsdgGraph under_ip = sampled;
  EXPECT_EQ(link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::InnerProduct, under_ip, control), 0);
  EXPECT_EQ(under_ip.neighbors, sampled.neighbors);
  // every list stays a valid TSDG list: ids in range, no self edge, no duplicate, λ ascending
  for (int64_t u = 0; u < graph.nodes; ++u) {
    const uint32_t* list = graph.list(u);
    const uint8_t* lambdas = graph.list_lambdas(u);
    std::vector<uint32_t> seen;
    for (int j = 0; j < graph.degree && list[j] != kInvalidId; ++j) {
      ASSERT_LT(list[j], static_cast<uint32_t>(graph.nodes));
      ASSERT_NE(list[j], static_cast<uint32_t>(u));
      ASSERT_EQ(std::count(seen.begin(), seen.end(), list[j]), 0);
      if (j > 0) {
        ASSERT_LE(lambdas[j - 1], lambdas[j]);
      }
      seen.push_back(list[j]);
    }
  }
}

// With a hundred rows a cluster, far more clusters than the navigating set
// has entries, the narrow walks of many rows of a cluster end at one node
// outside it: the rows that node links must route it to the others, which
// the check's passes then reach.
TEST(Navigability, TheBuildCheckLeavesFewRowsMissedWhereManyWalksEndAtOneNode) {
  ThreadPool pool(0);
  RunControl control;
  control.pool = &pool;
  const HardData d = hard_data(1.0f, control, 30000, 128, 300);
  const KnnGraph knn = gnnd_build(d.data.view(), Metric::L2, converged_gnnd(), control);
  TsdgGraph graph = diversify_tsdg(d.data.view(), Metric::L2, knn, DiversifyParams{}, control);
  const int64_t missed_before = rows_missed_by_narrow_walks(d, graph, control);
  ASSERT_GT(missed_before, d.data.rows / 50) << "the data must be hard enough for the check to have work";
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  EXPECT_GT(link_rows_missed_by_narrow_walks(*cpu, d.data.view(), Metric::L2, graph, control), 0);
  EXPECT_LE(rows_missed_by_narrow_walks(d, graph, control), missed_before / 30);
}

TEST(LongRange, ListsHoldTheKnnEntriesAndNearestPivotsAscending) {
  SyntheticSpec spec;
  spec.rows = 2000;
  spec.dim = 16;
  spec.clusters = 8;
  spec.absolute_scale = true;
  spec.spread = 4.0f;
  const Matrix data = make_clustered(spec);
  const RunControl control;
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 8, control);
  DiversifyParams params;
  params.pivot_candidates = 4;
  params.pivot_stride = 10;
  params.random_candidates = 3;
  const ExactSearch search = [&](MatrixView base, MatrixView queries, int k, uint32_t* ids, float* dists) {
    exact_knn(base, queries, Metric::L2, k, ids, dists, control);
  };
  const KnnGraph wide = with_long_range_candidates(data.view(), Metric::L2, knn, params, search, control);
  ASSERT_EQ(wide.k, 8 + 5 + 3);
  const std::vector<uint32_t> pivots = pivot_rows(data.rows, 10);
  for (int64_t u = 0; u < data.rows; u += 37) {
    const uint32_t* ids = wide.list(u);
    const float* dists = wide.list_dists(u);
    std::vector<uint32_t> valid;
    for (int j = 0; j < wide.k && ids[j] != kInvalidId; ++j) {
      EXPECT_NE(ids[j], static_cast<uint32_t>(u));
      if (j > 0) {
        EXPECT_LE(dists[j - 1], dists[j]);
      }
      valid.push_back(ids[j]);
    }
    std::vector<uint32_t> unique = valid;
    std::sort(unique.begin(), unique.end());
    EXPECT_EQ(std::unique(unique.begin(), unique.end()), unique.end());
    for (int j = 0; j < knn.k; ++j) EXPECT_NE(std::find(valid.begin(), valid.end(), knn.list(u)[j]), valid.end());
    // The pivot nearest u (other than u) is in its list.
    uint32_t nearest = kInvalidId;
    float best = 0.0f;
    for (uint32_t p : pivots) {
      if (p == u) continue;
      const float dist = metric_distance(Metric::L2, data.row(u), data.row(p), data.dim);
      if (nearest == kInvalidId || dist < best) {
        nearest = p;
        best = dist;
      }
    }
    EXPECT_NE(std::find(valid.begin(), valid.end(), nearest), valid.end()) << "row " << u;
  }
}

}  // namespace
}  // namespace tsdg
