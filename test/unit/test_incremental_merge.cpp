// The incremental merge of a batch into an indexed set: GGM restricted to the
// lists the batch can change (ggm_merge_incremental) and TSDG redone only
// where a list can change (diversify_tsdg_incremental). Both must give what
// the full steps give, nearly, while leaving the other lists as they were.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "bruteforce.h"
#include "capi_test_util.h"
#include "distance.h"
#include "diversify.h"
#include "ggm.h"
#include "gnnd.h"
#include "graph_invariants.h"
#include "knn_graph_test_util.h"
#include "long_range.h"
#include "recall.h"
#include "search.h"
#include "synthetic.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

using testing::clustered_rows;
using testing::two_sides;
using testing::TwoSides;
using testing::expect_list_invariants;
using testing::expect_valid_lists;
using testing::graph_recall;

// the old rows and graph first, the batch second
using Batch = TwoSides;

Batch make_batch(int64_t rows, int64_t split, const RunControl& control) {
  return two_sides(rows, split, 33, control);
}

IncrementalMerge merge(const Batch& b, const RunControl& control) {
  return ggm_merge_incremental(b.data.view(), b.split, b.first, b.second, Metric::L2,
                               b.params, control);
}

TEST(IncrementalGgm, RecallCloseToFullGgm) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const Batch b = make_batch(6000, 5000, control);
  const IncrementalMerge inc = merge(b, control);
  const KnnGraph full = ggm_merge(b.data.view(), b.split, b.first, b.second, Metric::L2,
                                  b.params, control);
  const KnnGraph exact = exact_knn_graph(b.data.view(), Metric::L2, 10, control);
  ASSERT_EQ(inc.graph.nodes, 6000);
  ASSERT_EQ(inc.graph.k, 16);
  expect_valid_lists(inc.graph);
  const double inc_recall = graph_recall(inc.graph, exact, 10);
  EXPECT_GE(inc_recall, graph_recall(full, exact, 10) - 0.02);
  EXPECT_GE(inc_recall, 0.93);
  EXPECT_GT(inc.iterations, 0);
  EXPECT_LE(inc.iterations, b.params.iterations);
}

// Only the batch rows' lists and the old lists that took a batch row change;
// a small batch leaves most old lists alone.
TEST(IncrementalGgm, OnlyListsNearTheBatchChange) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const Batch b = make_batch(5100, 5000, control);
  const IncrementalMerge inc = merge(b, control);
  int64_t changed_old = 0;
  for (int64_t s = 0; s < inc.graph.nodes; ++s) {
    const uint32_t* list = inc.graph.list(s);
    const bool holds_batch_row =
        std::any_of(list, list + inc.graph.k, [&](uint32_t v) { return v != kInvalidId && v >= b.split; });
    if (s >= b.split) {
      EXPECT_EQ(inc.changed[s], 1) << "batch row " << s;
      continue;
    }
    ASSERT_EQ(inc.changed[s], holds_batch_row ? 1 : 0) << "old row " << s;
    if (!inc.changed[s]) {
      ASSERT_TRUE(std::equal(list, list + inc.graph.k, b.first.list(s))) << "old row " << s;
    }
    changed_old += inc.changed[s];
  }
  EXPECT_GT(changed_old, 0);
  EXPECT_LT(changed_old, b.split / 2);
}

// An index keeps only the old lists' ids: the merge computes their distances
// and merges as well as with them given.
// Separated clusters of a few hundred rows, which the old k-NN graph does
// not link to one another: the batch rows' merged lists hold their old
// neighbors in every cluster, also in those that a sample of one old row in
// 256 as the walks' starts would miss.
TEST(IncrementalGgm, BatchRowsFindTheirOldNeighborsInSeparatedClusters) {
  SyntheticSpec spec;
  spec.rows = 13200;
  spec.dim = 24;
  spec.clusters = 60;
  spec.intrinsic_dim = 8;
  spec.spread = 4.0f;
  spec.absolute_scale = true;
  spec.seed = 5;
  const Matrix data = make_clustered(spec);
  const int64_t split = 12000, batch = data.rows - split;
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  GnndParams params;
  params.k = 16;
  params.samples = 8;
  const KnnGraph old_graph = exact_knn_graph(data.view().slice(0, split), Metric::L2, params.k, control);
  const KnnGraph batch_graph = exact_knn_graph(data.view().slice(split, batch), Metric::L2, params.k, control);
  const IncrementalMerge merged = ggm_merge_incremental(data.view(), split, old_graph, batch_graph, Metric::L2,
                                                        incremental_merge_params(params), control);
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, params.k, control);
  const double recall = recall_at(merged.graph.ids.data() + split * params.k, params.k,
                                  exact.ids.data() + split * params.k, params.k, batch, 10);
  EXPECT_GT(recall, 0.9);
}

TEST(IncrementalGgm, ComputesMissingOldDistances) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  Batch b = make_batch(6000, 5600, control);
  const IncrementalMerge given = merge(b, control);
  KnnGraph ids_only = b.first;
  ids_only.dists.clear();
  const IncrementalMerge computed = ggm_merge_incremental(b.data.view(), b.split, ids_only, b.second,
                                                          Metric::L2, b.params, control);
  const KnnGraph exact = exact_knn_graph(b.data.view(), Metric::L2, 10, control);
  expect_valid_lists(computed.graph);
  EXPECT_GE(graph_recall(computed.graph, exact, 10), graph_recall(given.graph, exact, 10) - 0.005);
  for (int64_t s = 0; s < b.split; ++s) {
    if (computed.changed[s]) continue;
    for (int j = 0; j < computed.graph.k; ++j) {
      const uint32_t v = computed.graph.list(s)[j];
      ASSERT_NE(v, kInvalidId);
      const float d = metric_distance(Metric::L2, b.data.view().row(s), b.data.view().row(v), b.data.dim);
      ASSERT_NEAR(computed.graph.list_dists(s)[j], d, 1e-4f * std::max(1.0f, d)) << "old row " << s;
    }
  }
}

TEST(IncrementalGgm, SameSeedSameGraphOnAnyThreadCount) {
  ThreadPool pool(2);
  RunControl threaded;
  threaded.pool = &pool;
  const Batch b = make_batch(3000, 2500, threaded);
  const IncrementalMerge a = merge(b, RunControl{});
  const IncrementalMerge c = merge(b, threaded);
  EXPECT_EQ(a.graph.ids, c.graph.ids);
  EXPECT_EQ(a.graph.dists, c.graph.dists);
  EXPECT_EQ(a.changed, c.changed);
}

TEST(IncrementalGgm, EmptyBatchKeepsTheOldGraph) {
  const Batch b = make_batch(1000, 1000, RunControl{});
  const IncrementalMerge inc = merge(b, RunControl{});
  EXPECT_EQ(inc.graph.ids, b.first.ids);
  EXPECT_EQ(std::count(inc.changed.begin(), inc.changed.end(), 1), 0);
}

// The old search graph and the merged k-NN graph of a batch, as a merge has them.
struct Rediversify {
  Batch batch;
  TsdgGraph old_search;
  IncrementalMerge merged;
  DiversifyParams params{16, 1.2f, 10};
};

Rediversify make_rediversify(int64_t rows, int64_t split, const RunControl& control) {
  Rediversify r;
  r.batch = make_batch(rows, split, control);
  r.old_search = diversify_tsdg(r.batch.data.view().slice(0, split), Metric::L2, r.batch.first,
                                r.params, control);
  r.merged = merge(r.batch, control);
  return r;
}

// The k-NN list changes as a merge passes them on: an old list the GGM
// changed took batch rows in; the batch rows' lists are new.
std::vector<uint8_t> knn_changes(const Rediversify& r) {
  std::vector<uint8_t> changes(r.merged.changed.size());
  for (size_t u = 0; u < changes.size(); ++u) {
    changes[u] = static_cast<int64_t>(u) >= r.batch.split ? kKnnListRebuilt
                 : r.merged.changed[u]                    ? kKnnListGainedNewRows
                                                          : kKnnListSame;
  }
  return changes;
}

TEST(IncrementalDiversify, KeepsTheListInvariantsAndTheUnchangedLists) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const Rediversify r = make_rediversify(5200, 5000, control);
  std::vector<uint8_t> list_changed;
  const TsdgGraph graph = diversify_tsdg_incremental(r.batch.data.view(), Metric::L2, r.merged.graph,
                                                     knn_changes(r), GraphView::of(r.old_search), r.params, control,
                                                     list_changed);
  ASSERT_EQ(graph.nodes, 5200);
  ASSERT_EQ(graph.degree, r.params.degree);
  expect_list_invariants(graph, r.params.lambda0);
  int64_t changed_old = 0;
  for (int64_t u = 0; u < graph.nodes; ++u) {
    if (u >= r.batch.split) {
      EXPECT_EQ(list_changed[u], 1);
      continue;
    }
    const bool same = std::equal(graph.list(u), graph.list(u) + graph.degree, r.old_search.list(u)) &&
                      std::equal(graph.list_lambdas(u), graph.list_lambdas(u) + graph.degree,
                                 r.old_search.list_lambdas(u));
    ASSERT_EQ(list_changed[u], same ? 0 : 1) << "node " << u;
    changed_old += list_changed[u];
  }
  // A batch of 200 rows reaches some old lists, not most.
  EXPECT_GT(changed_old, 0);
  EXPECT_LT(changed_old, r.batch.split / 2);
  // Every batch row can be reached: some list points to it.
  std::vector<bool> pointed_to(graph.nodes, false);
  for (uint32_t v : graph.neighbors) {
    if (v != kInvalidId) pointed_to[v] = true;
  }
  for (int64_t u = r.batch.split; u < graph.nodes; ++u) EXPECT_TRUE(pointed_to[u]) << "node " << u;
}

TEST(IncrementalDiversify, NothingChangedKeepsTheGraph) {
  RunControl control;
  const Rediversify r = make_rediversify(1500, 1500, control);
  std::vector<uint8_t> list_changed;
  const TsdgGraph graph =
      diversify_tsdg_incremental(r.batch.data.view(), Metric::L2, r.merged.graph, knn_changes(r),
                                 GraphView::of(r.old_search), r.params, control, list_changed);
  EXPECT_EQ(graph.neighbors, r.old_search.neighbors);
  EXPECT_EQ(graph.lambdas, r.old_search.lambdas);
  EXPECT_EQ(std::count(list_changed.begin(), list_changed.end(), 1), 0);
}

// Searches on the incrementally re-diversified graph find what searches on a
// graph diversified from scratch find.
TEST(IncrementalDiversify, SearchRecallCloseToAFullDiversification) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const Rediversify r = make_rediversify(6000, 5000, control);
  const MatrixView data = r.batch.data.view();
  std::vector<uint8_t> list_changed;
  const TsdgGraph incremental = diversify_tsdg_incremental(
      data, Metric::L2, r.merged.graph, knn_changes(r), GraphView::of(r.old_search), r.params, control, list_changed);
  // Every changed old list rebuilt, as after deletes: both stages on it.
  std::vector<uint8_t> rebuilt = knn_changes(r);
  std::replace(rebuilt.begin(), rebuilt.end(), uint8_t{kKnnListGainedNewRows}, uint8_t{kKnnListRebuilt});
  const TsdgGraph incremental_rebuilt = diversify_tsdg_incremental(
      data, Metric::L2, r.merged.graph, rebuilt, GraphView::of(r.old_search), r.params, control, list_changed);
  const TsdgGraph full = diversify_tsdg(data, Metric::L2, r.merged.graph, r.params, control);

  // Queries: every 20th row, the batch included; the row itself is its own nearest.
  const int64_t queries = data.rows / 20;
  Matrix query(queries, data.dim);
  for (int64_t q = 0; q < queries; ++q) std::copy(data.row(q * 20), data.row(q * 20) + data.dim, query.row(q));
  const int k = 10;
  std::vector<uint32_t> truth(queries * k);
  std::vector<float> truth_dists(queries * k);
  exact_knn(data, query.view(), Metric::L2, k, truth.data(), truth_dists.data(), control);
  SearchParams search;
  search.k = k;
  search.ef = 32;
  const auto recall = [&](const TsdgGraph& graph) {
    CpuSearchIndex index(data, GraphView::of(graph), Metric::L2);
    std::vector<uint32_t> ids(queries * k);
    std::vector<float> dists(queries * k);
    index.search(query.view(), search, ids.data(), dists.data(), control);
    int64_t hits = 0;
    for (int64_t q = 0; q < queries; ++q) {
      const std::set<uint32_t> expected(truth.begin() + q * k, truth.begin() + (q + 1) * k);
      for (int j = 0; j < k; ++j) hits += expected.count(ids[q * k + j]);
    }
    return static_cast<double>(hits) / static_cast<double>(queries * k);
  };
  const double full_recall = recall(full);
  EXPECT_GE(recall(incremental), full_recall - 0.01);
  EXPECT_GE(recall(incremental_rebuilt), full_recall - 0.01);
  EXPECT_GE(full_recall, 0.9);
}

// An old node that no batch row's k-NN list holds and whose own k-NN list
// did not change gets no new edge: it keeps its stored list.
TEST(IncrementalDiversify, NodesTheBatchDoesNotReachKeepTheirLists) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const Rediversify r = make_rediversify(5100, 5000, control);
  const std::vector<uint8_t> changes = knn_changes(r);
  // The batch reaches the nodes its rows' candidates hold: their k-NN lists
  // and their long-range candidates, which only the rebuilt lists take.
  std::vector<uint32_t> rebuilt;
  for (int64_t u = 0; u < r.merged.graph.nodes; ++u) {
    if (u >= r.batch.split || changes[u] == kKnnListRebuilt) rebuilt.push_back(static_cast<uint32_t>(u));
  }
  const ExactSearch search = [&](MatrixView base, MatrixView queries, int k, uint32_t* ids, float* dists) {
    exact_knn(base, queries, Metric::L2, k, ids, dists, control);
  };
  const KnnGraph candidates = with_long_range_candidates(r.batch.data.view(), Metric::L2, r.merged.graph, r.params,
                                                         search, control, &rebuilt);
  std::vector<bool> reached(candidates.nodes, false);
  for (int64_t b = r.batch.split; b < candidates.nodes; ++b) {
    for (int j = 0; j < candidates.k; ++j) {
      const uint32_t v = candidates.list(b)[j];
      if (v != kInvalidId) reached[v] = true;
    }
  }
  std::vector<uint8_t> list_changed;
  const TsdgGraph graph = diversify_tsdg_incremental(r.batch.data.view(), Metric::L2, r.merged.graph, changes,
                                                     GraphView::of(r.old_search), r.params, control, list_changed);
  int64_t kept = 0;
  for (int64_t u = 0; u < r.batch.split; ++u) {
    if (changes[u] != kKnnListSame || reached[u]) continue;
    ASSERT_TRUE(std::equal(graph.list(u), graph.list(u) + graph.degree, r.old_search.list(u))) << "node " << u;
    ASSERT_EQ(list_changed[u], 0) << "node " << u;
    ++kept;
  }
  EXPECT_GT(kept, r.batch.split / 4);
}

// The C interface's parameters of these small merges.
TsdgBuildParams small_merge_params() { return testing::capi_test_params(16); }

// Through the C interface, three batches merged one after the other into a
// built index search as well as an index built on all rows at once, and each
// merged row is found first when looked up by its own vector.
TEST(IncrementalMergeCapi, SuccessiveMergesSearchLikeAFreshBuild) {
  const Matrix data = clustered_rows(6500, 24, 41);
  const int64_t first = 5000, batch = 500;
  const TsdgBuildParams params = small_merge_params();
  TsdgError error;
  const auto build = [&](int64_t n, std::vector<uint32_t>& neighbors, std::vector<uint8_t>& lambdas,
                         std::vector<uint32_t>& knn) {
    neighbors.resize(n * params.degree);
    lambdas.resize(neighbors.size());
    knn.resize(n * params.build_k);
    ASSERT_EQ(tsdg_build_graph(nullptr, data.values.data(), n, data.dim, TSDG_METRIC_L2, &params,
                               neighbors.data(), lambdas.data(), knn.data(), nullptr, nullptr, nullptr, &error),
              TSDG_OK)
        << error.message;
  };
  std::vector<uint32_t> fresh_neighbors, fresh_knn, neighbors, knn;
  std::vector<uint8_t> fresh_lambdas, lambdas;
  build(data.rows, fresh_neighbors, fresh_lambdas, fresh_knn);
  build(first, neighbors, lambdas, knn);
  for (int64_t n_old = first; n_old < data.rows; n_old += batch) {
    const int64_t n = n_old + batch;
    std::vector<uint32_t> merged_knn(n * params.build_k), merged_neighbors(n * params.degree);
    std::vector<uint8_t> merged_lambdas(merged_neighbors.size()), changed(n);
    ASSERT_EQ(tsdg_merge_graph_incremental(nullptr, data.values.data(), nullptr, nullptr, n_old, batch, data.dim, TSDG_METRIC_L2,
                                           &params, knn.data(), nullptr, neighbors.data(), lambdas.data(),
                                           nullptr, merged_knn.data(), nullptr, merged_neighbors.data(),
                                           merged_lambdas.data(), changed.data(), nullptr, nullptr, nullptr, nullptr, &error),
              TSDG_OK)
        << error.message;
    knn.swap(merged_knn);
    neighbors.swap(merged_neighbors);
    lambdas.swap(merged_lambdas);
  }

  const MatrixView all = data.view();
  const int k = 10;
  const int64_t queries = data.rows / 10;
  Matrix query(queries, data.dim);
  for (int64_t q = 0; q < queries; ++q) std::copy(all.row(q * 10 + 3), all.row(q * 10 + 3) + data.dim, query.row(q));
  std::vector<uint32_t> truth(queries * k);
  std::vector<float> truth_dists(truth.size());
  exact_knn(all, query.view(), Metric::L2, k, truth.data(), truth_dists.data(), RunControl{});
  SearchParams search;
  search.k = k;
  search.ef = 24;
  const auto recall = [&](const std::vector<uint32_t>& graph_neighbors, const std::vector<uint8_t>& graph_lambdas) {
    CpuSearchIndex index(all, GraphView{graph_neighbors.data(), graph_lambdas.data(), data.rows, params.degree},
                         Metric::L2);
    std::vector<uint32_t> ids(queries * k);
    std::vector<float> dists(ids.size());
    index.search(query.view(), search, ids.data(), dists.data(), RunControl{});
    return recall_at(ids.data(), k, truth.data(), k, queries, k);
  };
  const double fresh_recall = recall(fresh_neighbors, fresh_lambdas);
  EXPECT_GE(recall(neighbors, lambdas), fresh_recall - 0.01);
  EXPECT_GE(fresh_recall, 0.9);

  CpuSearchIndex index(all, GraphView{neighbors.data(), lambdas.data(), data.rows, params.degree}, Metric::L2);
  SearchParams lookup;
  lookup.k = 1;
  lookup.ef = 32;
  const int64_t merged_rows = data.rows - first;
  std::vector<uint32_t> found(merged_rows);
  std::vector<float> found_dists(merged_rows);
  index.search(all.slice(first, merged_rows), lookup, found.data(), found_dists.data(), RunControl{});
  int64_t misses = 0;
  for (int64_t i = 0; i < merged_rows; ++i) misses += found[i] != static_cast<uint32_t>(first + i);
  EXPECT_LE(misses, merged_rows / 100) << "merged rows not found first by their own vector";
}

}  // namespace
}  // namespace tsdg

namespace tsdg {
namespace {

// A merge that writes the merged graph's layer, the one its check walked
// from: the same graph as without, and the layer tsdg_build_layer builds
// from the merged rows.
TEST(IncrementalMergeCapi, MergeWithLayerWritesTheLayerTsdgBuildLayerBuilds) {
  const int64_t n_old = TSDG_LAYER_MIN_NODES - 400;
  const Matrix data = clustered_rows(n_old + 1200, 24, 36);
  const int64_t n = data.rows;
  const int64_t layer_nodes = tsdg_layer_node_count(n);
  ASSERT_GT(layer_nodes, 0);
  const TsdgBuildParams params = small_merge_params();
  std::vector<uint32_t> old_neighbors(n_old * params.degree), old_knn(n_old * params.build_k);
  std::vector<uint8_t> old_lambdas(old_neighbors.size());
  TsdgError error;
  ASSERT_EQ(tsdg_build_graph(nullptr, data.values.data(), n_old, data.dim, TSDG_METRIC_L2, &params,
                             old_neighbors.data(), old_lambdas.data(), old_knn.data(), nullptr, nullptr, nullptr,
                             &error),
            TSDG_OK)
      << error.message;
  struct Merged {
    std::vector<uint32_t> knn, neighbors, layer_ids;
    std::vector<uint8_t> lambdas, changed, layer_lambdas;
  };
  const auto merge = [&](bool with_layer) {
    Merged m;
    m.knn.resize(n * params.build_k);
    m.neighbors.resize(n * params.degree);
    m.lambdas.resize(m.neighbors.size());
    m.changed.resize(n);
    m.layer_ids.resize(with_layer ? layer_nodes * params.degree : 0);
    m.layer_lambdas.resize(m.layer_ids.size());
    EXPECT_EQ(tsdg_merge_graph_incremental(nullptr, data.values.data(), nullptr, nullptr, n_old, n - n_old,
                                           data.dim, TSDG_METRIC_L2, &params, old_knn.data(), nullptr,
                                           old_neighbors.data(), old_lambdas.data(), nullptr, m.knn.data(), nullptr,
                                           m.neighbors.data(), m.lambdas.data(), m.changed.data(),
                                           with_layer ? m.layer_ids.data() : nullptr,
                                           with_layer ? m.layer_lambdas.data() : nullptr, nullptr, nullptr, &error),
              TSDG_OK)
        << error.message;
    return m;
  };
  const Merged plain = merge(false);
  const Merged layered = merge(true);
  EXPECT_EQ(layered.neighbors, plain.neighbors);
  EXPECT_EQ(layered.lambdas, plain.lambdas);
  EXPECT_EQ(layered.changed, plain.changed);
  testing::expect_layer_of(data, params, layered.layer_ids, layered.layer_lambdas);
  Merged refused = plain;
  std::vector<uint32_t> ids_alone(layered.layer_ids.size());
  EXPECT_EQ(tsdg_merge_graph_incremental(nullptr, data.values.data(), nullptr, nullptr, n_old, n - n_old, data.dim,
                                         TSDG_METRIC_L2, &params, old_knn.data(), nullptr, old_neighbors.data(),
                                         old_lambdas.data(), nullptr, refused.knn.data(), nullptr,
                                         refused.neighbors.data(), refused.lambdas.data(), refused.changed.data(),
                                         ids_alone.data(), nullptr, nullptr, nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
}

// Through the C interface: the old graph as tsdg_build_graph stores it, the
// pending rows merged, the changed flags telling which lists to rewrite.
TEST(IncrementalMergeCapi, ChangedFlagsMarkEveryRewrittenList) {
  const Matrix data = clustered_rows(5300, 24, 35);
  const int64_t n_old = 5000;
  const int64_t n = data.rows;
  const TsdgBuildParams params = small_merge_params();
  std::vector<uint32_t> old_neighbors(n_old * params.degree), old_knn(n_old * params.build_k);
  std::vector<uint8_t> old_lambdas(old_neighbors.size());
  std::vector<float> old_knn_dists(old_knn.size());
  TsdgError error;
  ASSERT_EQ(tsdg_build_graph(nullptr, data.values.data(), n_old, data.dim, TSDG_METRIC_L2, &params,
                             old_neighbors.data(), old_lambdas.data(), old_knn.data(),
                             old_knn_dists.data(), nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;

  std::vector<uint32_t> knn(n * params.build_k), neighbors(n * params.degree);
  std::vector<uint8_t> lambdas(neighbors.size()), changed(n);
  ASSERT_EQ(tsdg_merge_graph_incremental(nullptr, data.values.data(), nullptr, nullptr, n_old, n - n_old, data.dim,
                                         TSDG_METRIC_L2, &params, old_knn.data(), nullptr,
                                         old_neighbors.data(), old_lambdas.data(), nullptr, knn.data(), nullptr,
                                         neighbors.data(), lambdas.data(), changed.data(), nullptr, nullptr, nullptr,
                                         nullptr, &error),
            TSDG_OK)
      << error.message;
  int64_t rewritten = 0;
  for (int64_t u = 0; u < n; ++u) {
    if (u >= n_old) {
      // the build's check may relink a new row's list after the merge wrote it
      EXPECT_EQ(changed[u] & ~TSDG_CHANGED_LINK, TSDG_CHANGED_KNN | TSDG_CHANGED_GRAPH);
      continue;
    }
    const bool same_knn = std::equal(knn.begin() + u * params.build_k, knn.begin() + (u + 1) * params.build_k,
                                     old_knn.begin() + u * params.build_k);
    const bool same_list =
        std::equal(neighbors.begin() + u * params.degree, neighbors.begin() + (u + 1) * params.degree,
                   old_neighbors.begin() + u * params.degree) &&
        std::equal(lambdas.begin() + u * params.degree, lambdas.begin() + (u + 1) * params.degree,
                   old_lambdas.begin() + u * params.degree);
    ASSERT_EQ((changed[u] & TSDG_CHANGED_KNN) == 0, same_knn) << "row " << u;
    ASSERT_EQ((changed[u] & TSDG_CHANGED_GRAPH) == 0, same_list) << "row " << u;
    rewritten += (changed[u] & TSDG_CHANGED_GRAPH) != 0;
  }
  EXPECT_GT(rewritten, 0);
  EXPECT_LT(rewritten, n_old);

  // TSDG_CHANGED_RECHECK marks the old rows that an old list held and its
  // merged list does not (fewer than the merge's budget here)
  std::set<uint32_t> lost;
  for (int64_t u = 0; u < n_old; ++u) {
    const auto merged = neighbors.begin() + u * params.degree;
    for (int j = 0; j < params.degree; ++j) {
      const uint32_t v = old_neighbors[u * params.degree + j];
      if (v < n_old && std::find(merged, merged + params.degree, v) == merged + params.degree) lost.insert(v);
    }
  }
  ASSERT_GT(lost.size(), 0u);
  ASSERT_LT(lost.size(), static_cast<size_t>(8 * (n - n_old)));
  for (int64_t u = 0; u < n; ++u) {
    EXPECT_EQ((changed[u] & TSDG_CHANGED_RECHECK) != 0, lost.count(static_cast<uint32_t>(u)) != 0) << "row " << u;
  }

  // A list marked in old_changed (repaired after deletes) counts as a changed
  // k-NN list, so its search list is built again.
  const auto untouched = std::find(changed.begin(), changed.begin() + n_old, 0) - changed.begin();
  ASSERT_LT(untouched, n_old);
  std::vector<uint8_t> old_changed(n_old, 0);
  old_changed[untouched] = TSDG_OLD_REBUILT;
  // a row the caller asks to check again is marked so, its list left as it is
  const auto recheck = std::find_if(changed.begin() + untouched + 1, changed.begin() + n_old,
                                    [](uint8_t flags) { return flags == 0; }) - changed.begin();
  ASSERT_LT(recheck, n_old);
  old_changed[recheck] = TSDG_OLD_RECHECK;
  ASSERT_EQ(tsdg_merge_graph_incremental(nullptr, data.values.data(), nullptr, nullptr, n_old, n - n_old, data.dim,
                                         TSDG_METRIC_L2, &params, old_knn.data(), nullptr,
                                         old_neighbors.data(), old_lambdas.data(), old_changed.data(),
                                         knn.data(), nullptr, neighbors.data(), lambdas.data(),
                                         changed.data(), nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  EXPECT_NE(changed[untouched] & TSDG_CHANGED_KNN, 0);
  EXPECT_EQ(changed[recheck], TSDG_CHANGED_RECHECK);

  // The old rows handed as a source (a worker's copy of the old graph): the
  // merge copies them into rows itself and computes what it computes from
  // rows that hold them already.
  std::vector<float> rows(data.values.size(), 0.0f);
  std::copy(data.values.begin() + n_old * data.dim, data.values.end(), rows.begin() + n_old * data.dim);
  std::vector<uint32_t> source_knn(knn.size()), source_neighbors(neighbors.size());
  std::vector<uint8_t> source_lambdas(lambdas.size()), source_changed(n);
  ASSERT_EQ(tsdg_merge_graph_incremental(nullptr, rows.data(), nullptr, data.values.data(), n_old, n - n_old,
                                         data.dim, TSDG_METRIC_L2, &params, old_knn.data(), nullptr,
                                         old_neighbors.data(), old_lambdas.data(), old_changed.data(),
                                         source_knn.data(), nullptr, source_neighbors.data(), source_lambdas.data(),
                                         source_changed.data(), nullptr, nullptr, nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  EXPECT_EQ(rows, data.values);
  EXPECT_EQ(source_knn, knn);
  EXPECT_EQ(source_neighbors, neighbors);
  EXPECT_EQ(source_lambdas, lambdas);

  // A stored list pointing past the old rows is refused, not followed; the
  // old rows handed as a source are in rows all the same.
  old_knn[3] = static_cast<uint32_t>(n_old);
  std::fill(rows.begin(), rows.begin() + n_old * data.dim, 0.0f);
  EXPECT_EQ(tsdg_merge_graph_incremental(nullptr, rows.data(), nullptr, data.values.data(), n_old, n - n_old,
                                         data.dim, TSDG_METRIC_L2, &params, old_knn.data(), nullptr,
                                         old_neighbors.data(), old_lambdas.data(), nullptr, knn.data(), nullptr,
                                         neighbors.data(), lambdas.data(), changed.data(), nullptr, nullptr, nullptr,
                                         nullptr, &error),
            TSDG_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(rows, data.values);
}

}  // namespace
}  // namespace tsdg
