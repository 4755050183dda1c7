// TSDG diversification: the stored lists keep the invariants the search and
// the index pages rely on, the occlusion factors are what Inequation 1 counts,
// and a hand-checked example prunes as the paper's rules say.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <set>
#include <vector>

#include "connectivity.h"
#include "distance.h"
#include "diversify.h"
#include "thread_pool.h"
#include "graph_invariants.h"
#include "tsdg_test_graphs.h"

namespace tsdg {
namespace {

using testing::expect_list_invariants;
using testing::naive_occlusion_count;
using testing::small_clustered_spec;
using testing::tsdg_graph_of;

TEST(Diversify, ListInvariantsOnClusteredData) {
  const Matrix data = make_clustered(small_clustered_spec(3000, 24, 12, 3));
  for (const DiversifyParams& params :
       {DiversifyParams{16, 1.2f, 3}, DiversifyParams{32, 1.2f, 10}, DiversifyParams{8, 1.0f, 0}}) {
    const TsdgGraph graph = tsdg_graph_of(data, 32, params);
    ASSERT_EQ(graph.nodes, data.rows);
    ASSERT_EQ(graph.degree, params.degree);
    expect_list_invariants(graph, params.lambda0);
  }
}

// With λ0 = 254 nothing is dropped after stage 1, so where a list is not full
// it holds every candidate, and each stored λ must equal a naive count of the
// edges of that list that occlude it.
TEST(Diversify, OcclusionFactorsCountInequationOne) {
  const Matrix data = make_clustered(small_clustered_spec(1500, 16, 8, 5));
  const int k = 24;
  const TsdgGraph graph = tsdg_graph_of(data, k, DiversifyParams{2 * k, 1.2f, 254});
  int64_t edges = 0;
  int64_t positive = 0;
  for (int64_t u = 0; u < graph.nodes; ++u) {
    const uint32_t* ids = graph.list(u);
    if (ids[graph.degree - 1] != kInvalidId) continue;  // full: candidates may be cut
    for (int j = 0; j < graph.degree && ids[j] != kInvalidId; ++j) {
      const int expected = naive_occlusion_count(data, graph, u, j);
      ASSERT_EQ(graph.list_lambdas(u)[j], expected) << "node " << u << " edge " << j;
      ++edges;
      positive += expected > 0;
    }
  }
  // Stage 1 keeps edges it does not fully occlude, so some λ must be positive.
  EXPECT_GT(positive, 0);
  EXPECT_GT(edges, graph.nodes);
}

// Four points on a line, 0 1 2 3: stage 1 keeps only the edges to the
// adjacent points (0->2 is occluded by 0->1: 1.2 * 1 < 4 twice).
TEST(Diversify, PointsOnALineKeepOnlyAdjacentEdges) {
  Matrix data(4, 2);
  for (int i = 0; i < 4; ++i) data.row(i)[0] = static_cast<float>(i);
  const TsdgGraph graph = tsdg_graph_of(data, 3, DiversifyParams{3, 1.2f, 10});
  const std::vector<std::vector<uint32_t>> expected = {{1}, {0, 2}, {1, 3}, {2}};
  for (int u = 0; u < 4; ++u) {
    std::vector<uint32_t> found;
    for (int j = 0; j < 3 && graph.list(u)[j] != kInvalidId; ++j) {
      found.push_back(graph.list(u)[j]);
      EXPECT_EQ(graph.list_lambdas(u)[j], 0);
    }
    EXPECT_EQ(found, expected[u]) << "node " << u;
  }
}

TEST(Diversify, ReverseEdgesMakeTheGraphMostlySymmetric) {
  const Matrix data = make_clustered(small_clustered_spec(2000, 16, 8, 9));
  const TsdgGraph graph = tsdg_graph_of(data, 32, DiversifyParams{32, 1.2f, 10});
  std::set<std::pair<uint32_t, uint32_t>> edges;
  for (int64_t u = 0; u < graph.nodes; ++u) {
    for (int j = 0; j < graph.degree && graph.list(u)[j] != kInvalidId; ++j) {
      edges.emplace(static_cast<uint32_t>(u), graph.list(u)[j]);
    }
  }
  int64_t symmetric = 0;
  for (const auto& e : edges) symmetric += edges.count({e.second, e.first});
  EXPECT_GT(static_cast<double>(symmetric) / edges.size(), 0.8);
}

// The nodes reached from node 0 along the graph's edges (either_way: along
// them in both directions, the components the linking joins).
int64_t reached_from_first(const TsdgGraph& graph, bool either_way) {
  std::vector<std::vector<uint32_t>> next(graph.nodes);
  for (int64_t u = 0; u < graph.nodes; ++u) {
    for (int j = 0; j < graph.degree && graph.list(u)[j] != kInvalidId; ++j) {
      next[u].push_back(graph.list(u)[j]);
      if (either_way) next[graph.list(u)[j]].push_back(static_cast<uint32_t>(u));
    }
  }
  std::vector<bool> reached(graph.nodes, false);
  std::vector<uint32_t> frontier{0};
  reached[0] = true;
  while (!frontier.empty()) {
    const uint32_t u = frontier.back();
    frontier.pop_back();
    for (const uint32_t v : next[u]) {
      if (!reached[v]) {
        reached[v] = true;
        frontier.push_back(v);
      }
    }
  }
  return std::count(reached.begin(), reached.end(), true);
}

// Three far apart blobs: no k-NN list leaves its blob, so only the
// connectivity step can join them; every node must be reachable from node 0.
TEST(Diversify, SeparateClustersAreBridged) {
  const int per_blob = 150;
  Matrix data(3 * per_blob, 4);
  std::mt19937 rng(3);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (int64_t i = 0; i < data.rows; ++i) {
    for (int j = 0; j < data.dim; ++j) data.row(i)[j] = noise(rng) + (j == 0 ? 1000.0f * (i / per_blob) : 0.0f);
  }
  const TsdgGraph graph = tsdg_graph_of(data, 10, DiversifyParams{12, 1.2f, 10});
  expect_list_invariants(graph, 10);
  EXPECT_EQ(reached_from_first(graph, false), data.rows);
}

// Three blobs of per_blob points on a line, 1000 apart, into data, and their
// graph of the given degree: each blob a chain (a point's lists name the
// points before and after it in its blob), no list leaving its blob.
TsdgGraph three_blob_chains(int per_blob, int degree, Matrix& data) {
  data = Matrix(3 * per_blob, 2);
  TsdgGraph chains(data.rows, degree);
  for (int64_t i = 0; i < data.rows; ++i) {
    data.row(i)[0] = static_cast<float>(i % per_blob) + 1000.0f * static_cast<float>(i / per_blob);
    data.row(i)[1] = 0.0f;
    int count = 0;
    for (const int64_t j : {i - 1, i + 1}) {
      if (j >= 0 && j < data.rows && j / per_blob == i / per_blob) {
        chains.neighbors[i * degree + count] = static_cast<uint32_t>(j);
        chains.lambdas[i * degree + count++] = 1;
      }
    }
  }
  return chains;
}

// The component linking marks in relinked exactly the lists it changes
// (a merge writes those pages again, tsdg_capi.h): three blobs, each a chain
// whose lists stay inside it, joined by the bridges it adds.
TEST(Diversify, ComponentLinkingMarksTheListsItChanges) {
  const int per_blob = 100;
  const int degree = 4;
  Matrix data;
  TsdgGraph chains = three_blob_chains(per_blob, degree, data);
  TsdgGraph linked = chains;
  std::vector<uint8_t> relinked(data.rows, 0);
  const int64_t bridges = connect_components(data.view(), GraphSpan::of(linked), RunControl{}, relinked.data());
  EXPECT_GE(bridges, 4);
  int64_t marked = 0;
  for (int64_t u = 0; u < data.rows; ++u) {
    const bool differs = !std::equal(chains.list(u), chains.list(u) + degree, linked.list(u)) ||
                         !std::equal(chains.list_lambdas(u), chains.list_lambdas(u) + degree, linked.list_lambdas(u));
    ASSERT_EQ(relinked[u] != 0, differs) << "list " << u;
    marked += relinked[u];
  }
  EXPECT_GE(marked, 2);
  EXPECT_LE(marked, bridges);
}

// Blobs joined only by an edge late in some lists are one component: the
// linking, which unites the first edges of every list before the others,
// adds no bridge (and changes no list) there, and bridges them once that
// edge is gone.
TEST(Diversify, ComponentsJoinedByLaterEdgesNeedNoBridge) {
  const int per_blob = 100;
  const int degree = 6;
  Matrix data;
  TsdgGraph chains = three_blob_chains(per_blob, degree, data);
  // the middle of each blob points, third in its list (after its two chain
  // edges), to the next blob's
  for (int blob = 0; blob + 1 < 3; ++blob) {
    const int64_t from = blob * per_blob + per_blob / 2;
    chains.neighbors[from * degree + 2] = static_cast<uint32_t>(from + per_blob);
    chains.lambdas[from * degree + 2] = 2;
  }
  TsdgGraph linked = chains;
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  EXPECT_EQ(connect_components(data.view(), GraphSpan::of(linked), control), 0);
  EXPECT_EQ(linked.neighbors, chains.neighbors);
  chains.neighbors[(per_blob + per_blob / 2) * degree + 2] = kInvalidId;
  EXPECT_GE(connect_components(data.view(), GraphSpan::of(chains), control), 2);
}

// A list ends at its first kInvalidId: an id after it joins nothing, also
// where the list ends before the edges united first (the host's scan once
// read past such an end).
TEST(Diversify, ComponentIdsStopAtTheListEnd) {
  TsdgGraph graph(4, 4);
  std::fill(graph.neighbors.begin(), graph.neighbors.end(), kInvalidId);
  const GraphSpan span = GraphSpan::of(graph);
  span.list(0)[0] = 1;
  span.list(0)[2] = 3;  // past the end of list 0
  span.list(1)[0] = 0;
  span.list(2)[0] = 3;
  span.list(3)[0] = 2;
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  HostGraphScan scan;
  int64_t count = 0;
  EXPECT_EQ(scan.component_ids(span, &count, control), (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(count, 2);
  EXPECT_TRUE(scan.unpointed_nodes(span, control).empty());
  span.list(1)[0] = kInvalidId;
  EXPECT_EQ(scan.unpointed_nodes(span, control), (std::vector<uint32_t>{0}));
}

// Components larger than the members their mean is sampled from are linked
// as well: three chains of 5,000 points end as one component.
TEST(Diversify, LinksComponentsLargerThanTheirMeanSample) {
  Matrix data;
  TsdgGraph chains = three_blob_chains(5000, 4, data);
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  EXPECT_GE(connect_components(data.view(), GraphSpan::of(chains), control), 4);
  EXPECT_EQ(reached_from_first(chains, true), data.rows);
}

TEST(Diversify, SameResultOnAThreadPool) {
  const Matrix data = make_clustered(small_clustered_spec(2000, 16, 8, 11));
  const RunControl inline_control;
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 32, inline_control);
  const DiversifyParams params;
  const TsdgGraph serial = diversify_tsdg(data.view(), Metric::L2, knn, params, inline_control);
  ThreadPool pool(3);
  RunControl pooled;
  pooled.pool = &pool;
  const TsdgGraph parallel = diversify_tsdg(data.view(), Metric::L2, knn, params, pooled);
  EXPECT_EQ(serial.neighbors, parallel.neighbors);
  EXPECT_EQ(serial.lambdas, parallel.lambdas);
}

TEST(Diversify, StopsWhenCancelled) {
  const Matrix data = make_clustered(small_clustered_spec(2000, 16, 8, 13));
  RunControl control;
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 16, control);
  std::atomic<bool> cancel{true};
  ThreadPool pool(2);
  control.pool = &pool;
  control.cancel = &cancel;
  try {
    diversify_tsdg(data.view(), Metric::L2, knn, DiversifyParams{}, control);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Cancelled);
  }
}

TEST(Diversify, RejectsBadParameters) {
  const Matrix data = make_clustered(small_clustered_spec(100, 8, 2, 1));
  const RunControl control;
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, 8, control);
  for (const DiversifyParams& bad :
       {DiversifyParams{0, 1.2f, 10}, DiversifyParams{8, 0.5f, 10}, DiversifyParams{8, 1.2f, 300}}) {
    try {
      diversify_tsdg(data.view(), Metric::L2, knn, bad, control);
      FAIL() << "accepted degree " << bad.degree << " alpha " << bad.alpha;
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), Status::InvalidArgument);
    }
  }
  const KnnGraph wrong_size(50, 8);
  EXPECT_THROW(diversify_tsdg(data.view(), Metric::L2, wrong_size, DiversifyParams{}, control),
               Error);
}

}  // namespace
}  // namespace tsdg
