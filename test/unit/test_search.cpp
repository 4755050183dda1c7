// Graph search: the in-memory search finds the exact answer when ef covers the
// data, is deterministic, and the incremental state machine widens, filters by
// λ and stops by the slack rule as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <tuple>
#include <vector>

#include "bruteforce.h"
#include "distance.h"
#include "entry_points.h"
#include "tsdg_capi.h"
#include "search.h"
#include "thread_pool.h"
#include "tsdg_test_graphs.h"

namespace tsdg {
namespace {

using testing::small_clustered_spec;
using testing::tsdg_graph_of;

struct Fixture {
  SyntheticSpec spec;
  Matrix data;
  Matrix queries;
  TsdgGraph graph;
  std::vector<uint32_t> truth_ids;
  std::vector<float> truth_dists;
};

// Brute force computes ||x||^2 + ||y||^2 - 2 x.y, the search the direct
// difference, so the two agree to rounding.
void expect_same_distance(float found, float exact) {
  EXPECT_NEAR(found, exact, 1e-5f * std::max(1.0f, std::fabs(exact)));
}

Fixture make_fixture(int64_t rows, int dim, int clusters, int k) {
  Fixture f;
  f.spec = small_clustered_spec(rows, dim, clusters, 21);
  f.data = make_clustered(f.spec);
  f.queries = make_clustered_queries(f.spec, 100, 77);
  f.graph = tsdg_graph_of(f.data, 32, DiversifyParams{});
  f.truth_ids.resize(f.queries.rows * k);
  f.truth_dists.resize(f.queries.rows * k);
  exact_knn(f.data.view(), f.queries.view(), Metric::L2, k, f.truth_ids.data(),
            f.truth_dists.data(), RunControl{});
  return f;
}

// Drives GraphSearch over an in-memory graph the way the index pages do.
void run_incremental(GraphSearch& search, const Fixture& f, const float* query) {
  std::vector<uint32_t> fresh(f.graph.degree);
  uint32_t node;
  while ((node = search.next()) != kInvalidId) {
    const int m = search.unvisited(f.graph.list(node), f.graph.list_lambdas(node), f.graph.degree,
                                   fresh.data());
    for (int i = 0; i < m; ++i) {
      search.offer(fresh[i], metric_distance(Metric::L2, query, f.data.row(fresh[i]), f.data.dim));
    }
  }
}

TEST(Search, ExactAnswerWhenEfCoversTheData) {
  const int k = 10;
  const Fixture f = make_fixture(1500, 16, 6, k);
  CpuSearchIndex index(f.data.view(), GraphView::of(f.graph), Metric::L2);
  SearchParams params;
  params.k = k;
  params.ef = static_cast<int>(f.data.rows);
  std::vector<uint32_t> ids(f.queries.rows * k);
  std::vector<float> dists(ids.size());
  index.search(f.queries.view(), params, ids.data(), dists.data(), RunControl{});
  for (size_t i = 0; i < ids.size(); ++i) {
    expect_same_distance(dists[i], f.truth_dists[i]);
  }
  EXPECT_GT(index.distance_computations(), 0);
}

TEST(Search, GoodRecallAtSmallEf) {
  const int k = 10;
  const Fixture f = make_fixture(3000, 16, 6, k);
  CpuSearchIndex index(f.data.view(), GraphView::of(f.graph), Metric::L2);
  SearchParams params;
  params.k = k;
  params.ef = 40;
  std::vector<uint32_t> ids(f.queries.rows * k);
  std::vector<float> dists(ids.size());
  index.search(f.queries.view(), params, ids.data(), dists.data(), RunControl{});
  int64_t hits = 0;
  for (int64_t q = 0; q < f.queries.rows; ++q) {
    const std::set<uint32_t> truth(f.truth_ids.begin() + q * k, f.truth_ids.begin() + (q + 1) * k);
    for (int j = 0; j < k; ++j) hits += truth.count(ids[q * k + j]);
  }
  EXPECT_GT(static_cast<double>(hits) / (f.queries.rows * k), 0.9);
  // Far fewer distances than a scan.
  EXPECT_LT(index.distance_computations(), f.queries.rows * f.data.rows / 3);
}

TEST(Search, SameSeedSameResultOnAnyPool) {
  const int k = 10;
  const Fixture f = make_fixture(2000, 16, 6, k);
  SearchParams params;
  params.k = k;
  params.ef = 24;
  std::vector<uint32_t> first(f.queries.rows * k), second(first.size());
  std::vector<float> dists(first.size());
  CpuSearchIndex a(f.data.view(), GraphView::of(f.graph), Metric::L2);
  a.search(f.queries.view(), params, first.data(), dists.data(), RunControl{});
  CpuSearchIndex b(f.data.view(), GraphView::of(f.graph), Metric::L2);
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  b.search(f.queries.view(), params, second.data(), dists.data(), control);
  EXPECT_EQ(first, second);
}

TEST(Search, LambdaLimitZeroVisitsFewerEdges) {
  const int k = 10;
  const Fixture f = make_fixture(2000, 16, 6, k);
  SearchParams params;
  params.k = k;
  params.ef = 32;
  std::vector<uint32_t> ids(f.queries.rows * k);
  std::vector<float> dists(ids.size());
  CpuSearchIndex all(f.data.view(), GraphView::of(f.graph), Metric::L2);
  all.search(f.queries.view(), params, ids.data(), dists.data(), RunControl{});
  params.lambda_limit = 0;
  CpuSearchIndex pruned(f.data.view(), GraphView::of(f.graph), Metric::L2);
  pruned.search(f.queries.view(), params, ids.data(), dists.data(), RunControl{});
  EXPECT_LT(pruned.distance_computations(), all.distance_computations());
}

TEST(Search, EntryPointsAreDistinctAndSpread) {
  const Fixture f = make_fixture(2000, 16, 6, 10);
  const std::vector<uint32_t> entries =
      select_entry_points(f.data.view(), GraphView::of(f.graph), 16, 7);
  ASSERT_EQ(entries.size(), 16u);
  EXPECT_EQ(std::set<uint32_t>(entries.begin(), entries.end()).size(), 16u);
  EXPECT_EQ(entries, select_entry_points(f.data.view(), GraphView::of(f.graph), 16, 7));
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  EXPECT_EQ(entries, select_entry_points(f.data.view(), GraphView::of(f.graph), 16, 7, control));
  const std::vector<uint32_t> few = select_entry_points(f.data.view().slice(0, 5), GraphView{}, 16, 7);
  EXPECT_EQ(few, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
}

TEST(Search, Nn1BoundIsTheLargestFirstNeighborDistanceOnAnyPool) {
  const Fixture f = make_fixture(40000, 16, 6, 10);
  double expected = 0.0;
  for (int64_t i = 0; i < f.graph.nodes; ++i) {
    const uint32_t nearest = f.graph.list(i)[0];
    if (nearest == kInvalidId) continue;
    double d2 = 0.0;
    for (int j = 0; j < f.data.dim; ++j) {
      const double diff = static_cast<double>(f.data.row(i)[j]) - f.data.row(nearest)[j];
      d2 += diff * diff;
    }
    expected = std::max(expected, d2);
  }
  const GraphView graph = GraphView::of(f.graph);
  const float alone = graph_nn1_bound(f.data.view(), graph, Metric::L2);
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  EXPECT_EQ(graph_nn1_bound(f.data.view(), graph, Metric::L2, control), alone);
  expect_same_distance(alone, static_cast<float>(expected));
}

TEST(GraphSearch, ExactWithFullEfAndNoDuplicateOffers) {
  const int k = 10;
  const Fixture f = make_fixture(1200, 16, 6, k);
  GraphSearch search(255, 0.0f);
  const float* query = f.queries.row(0);
  search.begin(static_cast<int>(f.data.rows));
  search.offer(0, metric_distance(Metric::L2, query, f.data.row(0), f.data.dim));
  run_incremental(search, f, query);
  std::vector<uint32_t> ids(k);
  std::vector<float> dists(k);
  ASSERT_EQ(search.results(ids.data(), dists.data(), k), k);
  for (int j = 0; j < k; ++j) expect_same_distance(dists[j], f.truth_dists[j]);
  EXPECT_LE(search.distance_count(), f.data.rows);
}

TEST(GraphSearch, WidenContinuesTheSameSearch) {
  const int k = 10;
  const Fixture f = make_fixture(2000, 16, 6, k);
  const float* query = f.queries.row(3);
  GraphSearch search(255, 0.0f);
  search.begin(5);
  search.offer(17, metric_distance(Metric::L2, query, f.data.row(17), f.data.dim));
  run_incremental(search, f, query);
  const int64_t narrow_count = search.distance_count();
  std::vector<uint32_t> narrow(5);
  std::vector<float> narrow_dists(5);
  ASSERT_EQ(search.results(narrow.data(), narrow_dists.data(), 5), 5);

  search.widen(static_cast<int>(f.data.rows));
  run_incremental(search, f, query);
  EXPECT_GT(search.distance_count(), narrow_count);
  EXPECT_LE(search.distance_count(), f.data.rows);  // nothing computed twice
  std::vector<uint32_t> wide(k);
  std::vector<float> wide_dists(k);
  ASSERT_EQ(search.results(wide.data(), wide_dists.data(), k), k);
  for (int j = 0; j < k; ++j) expect_same_distance(wide_dists[j], f.truth_dists[3 * k + j]);
  // Widening never loses what the narrow search found.
  for (int j = 0; j < 5; ++j) EXPECT_LE(wide_dists[j], narrow_dists[j]);
}

// A navigating set offered at once walks as the same entries offered one by
// one: the same results, the same distances computed, and a wider round
// continues both alike.
TEST(GraphSearch, OfferManyIsOffersInOrder) {
  const int k = 10;
  const Fixture f = make_fixture(3000, 16, 12, k);
  std::vector<uint32_t> entries(f.graph.degree * 40);
  std::vector<float> dists(entries.size());
  for (const int ef : {8, 40}) {
    for (int64_t q = 0; q < 5; ++q) {
      const float* query = f.queries.row(q);
      for (size_t i = 0; i < entries.size(); ++i) {
        entries[i] = static_cast<uint32_t>((i * 37 + q) % f.data.rows);
        dists[i] = metric_distance(Metric::L2, query, f.data.row(entries[i]), f.data.dim);
      }
      GraphSearch one_by_one(255, 0.0f);
      GraphSearch at_once(255, 0.0f);
      one_by_one.begin(ef);
      at_once.begin(ef);
      for (size_t i = 0; i < entries.size(); ++i) one_by_one.offer(entries[i], dists[i]);
      at_once.offer_many(entries.data(), dists.data(), static_cast<int64_t>(entries.size()));
      for (GraphSearch* search : {&one_by_one, &at_once}) {
        run_incremental(*search, f, query);
        search->widen(ef * 4);
        run_incremental(*search, f, query);
      }
      EXPECT_EQ(at_once.distance_count(), one_by_one.distance_count());
      std::vector<uint32_t> ids_one(ef * 4), ids_many(ef * 4);
      std::vector<float> dists_one(ef * 4), dists_many(ef * 4);
      const int found = one_by_one.results(ids_one.data(), dists_one.data(), ef * 4);
      ASSERT_EQ(at_once.results(ids_many.data(), dists_many.data(), ef * 4), found);
      EXPECT_EQ(ids_many, ids_one);
      EXPECT_EQ(dists_many, dists_one);
    }
  }
}

TEST(GraphSearch, UnvisitedFiltersByLambdaAndSeen) {
  GraphSearch search(1, 0.0f);
  search.begin(8);
  search.offer(4, 1.0f);
  const uint32_t ids[] = {4, 5, 6, 5, kInvalidId, 7};
  const uint8_t lambdas[] = {0, 0, 2, 1, 0, 1};
  uint32_t fresh[6];
  ASSERT_EQ(search.unvisited(ids, lambdas, 6, fresh), 2);
  EXPECT_EQ(fresh[0], 5u);
  EXPECT_EQ(fresh[1], 7u);
  EXPECT_EQ(search.unvisited(ids, lambdas, 6, fresh), 0);
}

TEST(GraphSearch, SlackRuleStopsEarly) {
  const Fixture f = make_fixture(3000, 16, 6, 10);
  const float* query = f.queries.row(5);
  auto count_with = [&](float slack) {
    GraphSearch search(255, slack);
    search.set_slack_context(Metric::L2, 10, std::numeric_limits<float>::infinity());
    search.begin(500);
    search.offer(0, metric_distance(Metric::L2, query, f.data.row(0), f.data.dim));
    run_incremental(search, f, query);
    std::vector<uint32_t> ids(10);
    std::vector<float> dists(10);
    search.results(ids.data(), dists.data(), 10);
    return std::make_pair(search.distance_count(), dists);
  };
  const auto unlimited = count_with(0.0f);
  const auto tight = count_with(0.1f);
  const auto loose = count_with(1000.0f);
  EXPECT_LT(tight.first, unlimited.first);
  EXPECT_EQ(loose.first, unlimited.first);
  EXPECT_EQ(loose.second, unlimited.second);
}

TEST(SlackRule, MatchesTheFormulaOnRootsForSquaredL2) {
  const SlackRule rule = slack_rule_for(Metric::L2, 0.5f, 10, 9.0f);
  // best_1 = 4 (root 2), best_k = 16 (root 4), nn1 = 9 (root 3):
  // bound = 4 + 0.5 * min(2, 3) = 5, i.e. 25 squared.
  EXPECT_FALSE(rule.stops(24.9f, 4.0f, 16.0f));
  EXPECT_TRUE(rule.stops(25.1f, 4.0f, 16.0f));
  const SlackRule capped = slack_rule_for(Metric::L2, 0.5f, 10, 1.0f);
  // bound = 4 + 0.5 * min(2, 1) = 4.5, i.e. 20.25 squared.
  EXPECT_TRUE(capped.stops(20.5f, 4.0f, 16.0f));
  const SlackRule cosine = slack_rule_for(Metric::Cosine, 1.0f, 10, 10.0f);
  EXPECT_FALSE(cosine.stops(0.59f, 0.2f, 0.4f));
  EXPECT_TRUE(cosine.stops(0.61f, 0.2f, 0.4f));
}

// The rows a search for their own vector misses at a small ef: each row's
// answer from the in-memory search and from GraphSearch as the pages drive it
// (entries offered first) has the row exactly when unreached_rows leaves it out.
TEST(Search, UnreachedRowsAreThoseTheirOwnSearchMisses) {
  const Fixture f = make_fixture(3000, 16, 6, 10);
  CpuSearchIndex index(f.data.view(), GraphView::of(f.graph), Metric::L2);
  SearchParams params;
  params.ef = 2;
  params.k = params.ef;
  const int64_t n = f.data.rows;
  const int64_t first = 1000;
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  const std::vector<uint32_t> unreached = index.unreached_rows(first, n, params, control);
  const std::set<uint32_t> missed(unreached.begin(), unreached.end());
  EXPECT_TRUE(std::is_sorted(unreached.begin(), unreached.end()));
  EXPECT_EQ(missed.size(), unreached.size());

  const std::vector<uint32_t> entries = navigating_set(f.data.view(), GraphView::of(f.graph), params);
  EXPECT_EQ(unreached_rows(f.data.view(), GraphView::of(f.graph), Metric::L2, entries.data(),
                           static_cast<int>(entries.size()), first, n, params.ef,
                           params.lambda_limit, RunControl{}),
            unreached);

  const MatrixView own{f.data.row(first), n - first, f.data.dim};
  std::vector<uint32_t> ids(own.rows * params.k);
  std::vector<float> dists(ids.size());
  index.search(own, params, ids.data(), dists.data(), RunControl{});
  GraphSearch paged(params.lambda_limit, 0.0f);
  std::vector<uint32_t> paged_ids(params.k);
  std::vector<float> paged_dists(params.k);
  for (int64_t q = 0; q < own.rows; ++q) {
    const uint32_t row = static_cast<uint32_t>(first + q);
    const uint32_t* found = &ids[q * params.k];
    const bool in_answer = std::find(found, found + params.k, row) != found + params.k;
    EXPECT_EQ(in_answer, missed.count(row) == 0) << "row " << row;

    paged.begin(params.ef);
    for (uint32_t e : entries) paged.offer(e, metric_distance(Metric::L2, own.row(q), f.data.row(e), f.data.dim));
    run_incremental(paged, f, own.row(q));
    const int count = paged.results(paged_ids.data(), paged_dists.data(), params.k);
    const bool in_paged = std::find(paged_ids.begin(), paged_ids.begin() + count, row) !=
                          paged_ids.begin() + count;
    EXPECT_EQ(in_paged, in_answer) << "row " << row;
  }
  // ef 2 loses some rows of 6 clusters but not most
  EXPECT_GT(unreached.size(), 0u);
  EXPECT_LT(unreached.size(), static_cast<size_t>(n - first) / 2);
}

// The repair leaves the rows a full check of the repaired graph finds
// unreached (its targeted walks miss none), far fewer than before, and
// changes only the lists it names, each still in λ order, each named to
// the caller before it is first written; with every walk kept, with none
// kept (all walked again), and with some kept.
class UnreachedRepair : public ::testing::TestWithParam<int64_t> {};

// Entry points are picked on the lists; an index told its lists changed
// picks them again, as an index made from the changed lists would.
TEST(Search, ChangedListsGiveTheEntryPointsOfTheChangedGraph) {
  const Fixture f = make_fixture(2000, 16, 6, 10);
  TsdgGraph graph(f.graph.nodes, f.graph.degree);
  std::copy(f.graph.neighbors.begin(), f.graph.neighbors.end(), graph.neighbors.begin());
  std::copy(f.graph.lambdas.begin(), f.graph.lambdas.end(), graph.lambdas.begin());
  CpuSearchIndex index(f.data.view(), GraphView::of(graph), Metric::L2);
  SearchParams params;
  params.entry_samples = 16;
  const std::vector<uint32_t> before = index.entry_points(params, RunControl{});

  // every list becomes one edge to the next node: the descents that pick
  // the entry points end elsewhere
  std::vector<uint32_t> changed;
  for (int64_t u = 0; u < graph.nodes; ++u) {
    uint32_t* list = graph.neighbors.data() + u * graph.degree;
    std::fill(list, list + graph.degree, kInvalidId);
    list[0] = static_cast<uint32_t>((u + 1) % graph.nodes);
    changed.push_back(static_cast<uint32_t>(u));
  }
  const std::vector<uint32_t> expected = navigating_set(f.data.view(), GraphView::of(graph), params);
  ASSERT_NE(expected, before);
  EXPECT_EQ(index.entry_points(params, RunControl{}), before);  // not told yet
  index.lists_changed(changed);
  EXPECT_EQ(index.entry_points(params, RunControl{}), expected);
}

// The cache computes the set again only for new params or changed lists,
// each time the set navigating_set gives for them.
TEST(Search, NavigatingSetCacheFollowsParamsAndLists) {
  const Fixture f = make_fixture(2000, 16, 6, 10);
  TsdgGraph graph(f.graph.nodes, f.graph.degree);
  std::copy(f.graph.neighbors.begin(), f.graph.neighbors.end(), graph.neighbors.begin());
  std::copy(f.graph.lambdas.begin(), f.graph.lambdas.end(), graph.lambdas.begin());
  SearchParams params;
  params.entry_samples = 16;
  NavigatingSetCache cache;
  EXPECT_TRUE(cache.refresh(f.data.view(), GraphView::of(graph), params, RunControl{}));
  EXPECT_EQ(cache.entries(), navigating_set(f.data.view(), GraphView::of(graph), params));
  EXPECT_FALSE(cache.refresh(f.data.view(), GraphView::of(graph), params, RunControl{}));

  for (int64_t u = 0; u < graph.nodes; ++u) {
    uint32_t* list = graph.neighbors.data() + u * graph.degree;
    std::rotate(list, list + 1, list + graph.degree);
  }
  cache.lists_changed();
  EXPECT_TRUE(cache.refresh(f.data.view(), GraphView::of(graph), params, RunControl{}));
  EXPECT_EQ(cache.entries(), navigating_set(f.data.view(), GraphView::of(graph), params));

  for (const auto& [samples, stride, seed] : {std::tuple{24, int64_t{-1}, uint64_t{42}},
                                              std::tuple{24, int64_t{100}, uint64_t{42}},
                                              std::tuple{24, int64_t{100}, uint64_t{7}}}) {
    params.entry_samples = samples;
    params.entry_stride = stride;
    params.seed = seed;
    EXPECT_TRUE(cache.refresh(f.data.view(), GraphView::of(graph), params, RunControl{}));
    EXPECT_EQ(cache.entries(), navigating_set(f.data.view(), GraphView::of(graph), params))
        << samples << " " << stride << " " << seed;
  }
  EXPECT_EQ(entry_points_toward(f.data.view(), GraphView::of(graph), entry_targets(f.data.view(), 24, 7)),
            select_entry_points(f.data.view(), GraphView::of(graph), 24, 7));
}

TEST(Search, NavigatingSetAddsEachStridedNodeOnce) {
  EXPECT_EQ(with_strided_entries({5, 10, 3}, 25, 5), (std::vector<uint32_t>{5, 10, 3, 0, 15, 20}));
  EXPECT_EQ(with_strided_entries({5, 10, 3}, 25, 0), (std::vector<uint32_t>{5, 10, 3}));
  EXPECT_EQ(with_strided_entries({}, 0, 5), (std::vector<uint32_t>{}));
  EXPECT_EQ(navigating_stride(1), kRowsPerStridedEntry);
  EXPECT_EQ(navigating_stride(kNodesAtBaseSpacing), kRowsPerStridedEntry);
  EXPECT_EQ(navigating_stride(10 * kNodesAtBaseSpacing), kRowsPerStridedEntry / 2);
  int64_t previous_count = 0;
  for (int64_t nodes = 1000; nodes <= int64_t{1} << 34; nodes *= 2) {
    const int64_t stride = navigating_stride(nodes);
    const int64_t count = (nodes + stride - 1) / stride;
    EXPECT_GE(stride, 1) << nodes;
    EXPECT_LE(count, kMaxStridedEntries) << nodes;
    EXPECT_GE(count, previous_count) << nodes;  // more nodes never get fewer entries
    EXPECT_EQ(tsdg_strided_entry_count(nodes), count) << nodes;
    previous_count = count;
  }
  EXPECT_EQ(previous_count, kMaxStridedEntries);

  const Fixture f = make_fixture(2000, 16, 6, 10);
  SearchParams params;
  params.entry_samples = 16;
  const std::vector<uint32_t> set = navigating_set(f.data.view(), GraphView::of(f.graph), params);
  const std::vector<uint32_t> selected = select_entry_points(f.data.view(), GraphView::of(f.graph), 16, params.seed);
  ASSERT_GT(set.size(), selected.size());
  EXPECT_TRUE(std::equal(selected.begin(), selected.end(), set.begin()));
  EXPECT_EQ(std::set<uint32_t>(set.begin(), set.end()).size(), set.size());
  for (uint32_t node = 0; node < 2000; node += kRowsPerStridedEntry) {
    EXPECT_NE(std::find(set.begin(), set.end(), node), set.end()) << node;
  }
}

INSTANTIATE_TEST_SUITE_P(RecordBudgets, UnreachedRepair, ::testing::Values(kMaxRecordedExpansions, 0, 4000));

TEST_P(UnreachedRepair, MatchesAFullCheck) {
  Fixture f = make_fixture(3000, 16, 6, 10);
  const TsdgGraph original = f.graph;
  const int ef = 1;
  const int64_t n = f.data.rows;
  const int64_t first = 1000;
  const std::vector<uint32_t> entries = select_entry_points(f.data.view(), GraphView::of(f.graph), 4, 7);
  ThreadPool pool(3);
  RunControl control;
  control.pool = &pool;
  UnreachedCheck check(f.data.view(), GraphView::of(f.graph), Metric::L2, entries.data(),
                       static_cast<int>(entries.size()), first, n, ef, 255, GetParam());
  check.run(control);
  const std::vector<uint32_t> before = check.unreached();
  EXPECT_EQ(before, unreached_rows(f.data.view(), GraphView::of(original), Metric::L2, entries.data(),
                                   static_cast<int>(entries.size()), first, n, ef, 255, RunControl{}));
  ASSERT_GT(before.size(), 10u);

  const int degree = f.graph.degree;
  std::vector<uint32_t> named;
  const auto list_as_built = [&](uint32_t u) {
    return std::equal(&original.neighbors[u * degree], &original.neighbors[(u + 1) * degree],
                      &f.graph.neighbors[u * degree]) &&
           std::equal(&original.lambdas[u * degree], &original.lambdas[(u + 1) * degree],
                      &f.graph.lambdas[u * degree]);
  };
  const std::vector<uint32_t> changed = check.repair(GraphSpan::of(f.graph), 2, control, [&](uint32_t node) {
    if (std::find(named.begin(), named.end(), node) != named.end()) return;
    EXPECT_TRUE(list_as_built(node)) << "node " << node << " written before it was named";
    named.push_back(node);
  });
  std::sort(named.begin(), named.end());
  EXPECT_EQ(named, changed);
  EXPECT_TRUE(std::is_sorted(changed.begin(), changed.end()));
  EXPECT_FALSE(changed.empty());
  EXPECT_EQ(check.unreached(), unreached_rows(f.data.view(), GraphView::of(f.graph), Metric::L2, entries.data(),
                                              static_cast<int>(entries.size()), first, n, ef, 255, RunControl{}));
  EXPECT_LT(check.unreached().size() * 4, before.size());

  for (int64_t u = 0; u < n; ++u) {
    const bool same = list_as_built(static_cast<uint32_t>(u));
    EXPECT_EQ(!same, std::binary_search(changed.begin(), changed.end(), static_cast<uint32_t>(u))) << "node " << u;
    if (same) continue;
    for (int j = 1; j < degree && f.graph.neighbors[u * degree + j] != kInvalidId; ++j) {
      EXPECT_LE(f.graph.lambdas[u * degree + j - 1], f.graph.lambdas[u * degree + j]) << "node " << u;
    }
  }
}

// A row no list points to is unreached at any ef unless it is an entry point.
TEST(Search, RowWithoutInEdgesIsUnreached) {
  Fixture f = make_fixture(1500, 16, 6, 10);
  SearchParams params;
  params.ef = 200;
  const std::vector<uint32_t> entries = navigating_set(f.data.view(), GraphView::of(f.graph), params);
  uint32_t orphan = 0;
  while (std::find(entries.begin(), entries.end(), orphan) != entries.end()) ++orphan;
  for (int64_t i = 0; i < f.graph.nodes; ++i) {
    uint32_t* list = &f.graph.neighbors[i * f.graph.degree];
    uint8_t* lambdas = &f.graph.lambdas[i * f.graph.degree];
    int kept = 0;
    for (int j = 0; j < f.graph.degree; ++j) {
      if (list[j] == orphan) continue;
      list[kept] = list[j];
      lambdas[kept++] = lambdas[j];
    }
    for (; kept < f.graph.degree; ++kept) {
      list[kept] = kInvalidId;
      lambdas[kept] = 0;
    }
  }
  CpuSearchIndex index(f.data.view(), GraphView::of(f.graph), Metric::L2);
  const std::vector<uint32_t> unreached = index.unreached_rows(0, f.data.rows, params, RunControl{});
  EXPECT_EQ(std::count(unreached.begin(), unreached.end(), orphan), 1);
  EXPECT_LT(unreached.size(), 10u);
}

// search_payload answers with the values of the first k_out results whose
// flags miss the skip bits, and pads with the missing value and +inf.
TEST(Search, PayloadAnswersLeaveOutSkippedNodes) {
  const Fixture f = make_fixture(1500, 16, 6, 10);
  CpuSearchIndex index(f.data.view(), GraphView::of(f.graph), Metric::L2);
  constexpr int kSize = 6;
  const int k_out = 10;
  const int64_t n = f.data.rows;
  std::vector<unsigned char> values(n * kSize);
  std::vector<uint8_t> flags(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t value = static_cast<uint32_t>(i) * 3 + 1;
    std::memcpy(&values[i * kSize], &value, sizeof(value));
    values[i * kSize + 4] = 0xab;
    values[i * kSize + 5] = static_cast<unsigned char>(i);
    if (i % 7 == 0) flags[i] |= 1;
    if (i % 5 == 0) flags[i] |= 2;  // not a skip bit
  }
  const unsigned char missing[kSize] = {0xff, 0xff, 0xff, 0xff, 0, 0};
  index.set_payload(values.data(), kSize, flags.data(), 1, missing);
  SearchParams params;
  params.k = 20;
  params.ef = 64;
  const int64_t nq = f.queries.rows;
  std::vector<uint32_t> ids(nq * params.k);
  std::vector<float> dists(ids.size());
  index.search(f.queries.view(), params, ids.data(), dists.data(), RunControl{});
  std::vector<unsigned char> out(nq * k_out * kSize);
  std::vector<float> out_dists(nq * k_out);
  index.search_payload(f.queries.view(), params, k_out, out.data(), out_dists.data(), RunControl{});

  int64_t skipped = 0;
  for (int64_t q = 0; q < nq; ++q) {
    int written = 0;
    for (int j = 0; j < params.k && written < k_out; ++j) {
      const uint32_t id = ids[q * params.k + j];
      ASSERT_NE(id, kInvalidId);
      if (flags[id] & 1) {
        ++skipped;
        continue;
      }
      EXPECT_EQ(std::memcmp(&out[(q * k_out + written) * kSize], &values[id * kSize], kSize), 0);
      EXPECT_EQ(out_dists[q * k_out + written], dists[q * params.k + j]);
      ++written;
    }
    EXPECT_EQ(written, k_out);
  }
  EXPECT_GT(skipped, nq);  // about one in seven of the results was left out

  std::vector<uint8_t> all_skipped(n, 1);
  index.set_payload(values.data(), kSize, all_skipped.data(), 1, missing);
  index.search_payload(f.queries.view(), params, k_out, out.data(), out_dists.data(), RunControl{});
  for (int64_t r = 0; r < nq * k_out; ++r) {
    EXPECT_EQ(std::memcmp(&out[r * kSize], missing, kSize), 0);
    EXPECT_TRUE(std::isinf(out_dists[r]));
  }
  EXPECT_THROW(index.search_payload(f.queries.view(), params, params.k + 1, out.data(), out_dists.data(),
                                    RunControl{}),
               Error);
}

}  // namespace
}  // namespace tsdg
