#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "bruteforce.h"
#include "descent.h"
#include "distance.h"
#include "knn_graph_test_util.h"
#include "gnnd.h"
#include "recall.h"
#include "synthetic.h"
#include "thread_pool.h"

namespace tsdg {
namespace {

using testing::clustered_rows;
using testing::expect_valid_lists;
using testing::graph_recall;

TEST(Gnnd, ReachesHighRecallOnSmallData) {
  const Matrix data = clustered_rows(5000, 32, 11);
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  GnndParams params;
  params.k = 20;
  params.samples = 10;
  const KnnGraph graph = gnnd_build(data.view(), Metric::L2, params, control);
  ASSERT_EQ(graph.nodes, 5000);
  ASSERT_EQ(graph.k, 20);
  expect_valid_lists(graph);
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, control);
  EXPECT_GE(graph_recall(graph, exact, 10), 0.95);
}

TEST(Gnnd, RecallGrowsWithIterations) {
  const Matrix data = clustered_rows(3000, 24, 12);
  GnndParams params;
  params.k = 16;
  params.samples = 8;
  params.min_update_rate = 0;
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 10, RunControl{});
  params.iterations = 0;
  const double random = graph_recall(gnnd_build(data.view(), Metric::L2, params, RunControl{}), exact, 10);
  params.iterations = 2;
  const double two = graph_recall(gnnd_build(data.view(), Metric::L2, params, RunControl{}), exact, 10);
  params.iterations = 8;
  const double eight = graph_recall(gnnd_build(data.view(), Metric::L2, params, RunControl{}), exact, 10);
  EXPECT_LT(random, 0.05);
  EXPECT_GT(two, random);
  EXPECT_GT(eight, two);
}

TEST(Gnnd, SameSeedSameGraphOnAnyThreadCount) {
  const Matrix data = clustered_rows(2000, 16, 13);
  GnndParams params;
  params.k = 12;
  params.samples = 6;
  params.iterations = 5;
  const KnnGraph single = gnnd_build(data.view(), Metric::L2, params, RunControl{});
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const KnnGraph threaded = gnnd_build(data.view(), Metric::L2, params, control);
  EXPECT_EQ(single.ids, threaded.ids);
  EXPECT_EQ(single.dists, threaded.dists);
  const KnnGraph again = gnnd_build(data.view(), Metric::L2, params, control);
  EXPECT_EQ(again.ids, threaded.ids);
  params.seed = 43;
  EXPECT_NE(gnnd_build(data.view(), Metric::L2, params, control).ids, threaded.ids);
}

TEST(Gnnd, InnerProductMetric) {
  Matrix data = clustered_rows(2000, 16, 14);
  GnndParams params;
  params.k = 16;
  params.samples = 8;
  const KnnGraph graph = gnnd_build(data.view(), Metric::InnerProduct, params, RunControl{});
  expect_valid_lists(graph);
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::InnerProduct, 10, RunControl{});
  EXPECT_GE(graph_recall(graph, exact, 10), 0.9);
}

// L1's joins score their tile pair by pair, not by a matrix product.
TEST(Gnnd, L1Metric) {
  Matrix data = clustered_rows(2000, 16, 14);
  GnndParams params;
  params.k = 16;
  params.samples = 8;
  const KnnGraph graph = gnnd_build(data.view(), Metric::L1, params, RunControl{});
  expect_valid_lists(graph);
  for (int64_t i = 0; i < graph.nodes; i += 97) {
    const uint32_t* ids = graph.list(i);
    const float* dists = graph.list_dists(i);
    for (int j = 0; j < graph.k && ids[j] != kInvalidId; ++j) {
      EXPECT_NEAR(dists[j], metric_distance(Metric::L1, data.row(i), data.row(ids[j]), data.dim),
                  1e-4f * std::max(1.0f, dists[j]));
    }
  }
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L1, 10, RunControl{});
  EXPECT_GE(graph_recall(graph, exact, 10), 0.9);
}

TEST(Gnnd, TinyInputs) {
  const Matrix data = clustered_rows(5, 4, 15);
  GnndParams params;
  params.k = 8;
  const KnnGraph graph = gnnd_build(data.view(), Metric::L2, params, RunControl{});
  expect_valid_lists(graph);
  // Every other row is a neighbor; the rest is padding.
  const KnnGraph exact = exact_knn_graph(data.view(), Metric::L2, 4, RunControl{});
  for (int64_t i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(graph.list(i)[j], exact.list(i)[j]);
    for (int j = 4; j < 8; ++j) EXPECT_EQ(graph.list(i)[j], kInvalidId);
  }
  EXPECT_EQ(gnnd_build(data.view().slice(0, 1), Metric::L2, params, RunControl{}).list(0)[0], kInvalidId);
  EXPECT_EQ(gnnd_build(data.view().slice(0, 0), Metric::L2, params, RunControl{}).nodes, 0);
}

TEST(Gnnd, RejectsBadParams) {
  const Matrix data = clustered_rows(100, 4, 16);
  GnndParams params;
  params.k = 0;
  EXPECT_THROW(gnnd_build(data.view(), Metric::L2, params, RunControl{}), Error);
  params.k = 8;
  params.samples = 0;
  EXPECT_THROW(gnnd_build(data.view(), Metric::L2, params, RunControl{}), Error);
}

TEST(Gnnd, CancelsMidBuildAndReportsProgress) {
  const Matrix data = clustered_rows(20000, 32, 17);
  ThreadPool pool(2);
  std::atomic<bool> cancel{false};
  std::atomic<int64_t> done{0}, total{0};
  RunControl control;
  control.pool = &pool;
  control.cancel = &cancel;
  control.progress_done = &done;
  control.progress_total = &total;
  GnndParams params;
  params.k = 16;
  params.iterations = 1000;
  params.min_update_rate = 0;
  std::thread canceller([&] {
    while (done.load() < 30000) std::this_thread::yield();
    cancel = true;
  });
  try {
    gnnd_build(data.view(), Metric::L2, params, control);
    ADD_FAILURE() << "expected Cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::Cancelled);
  }
  canceller.join();
  EXPECT_EQ(total.load(), 20000 * 1001);
  EXPECT_LT(done.load(), 20000 * 10);
}

// Floyd's draw gives count distinct values below range, past the count
// where it keeps them in a set as below it, also where every value is drawn.
TEST(Descent, DrawDistinctValuesBelowTheRange) {
  for (const auto& [range, count] : std::vector<std::pair<uint64_t, int>>{
           {100, 10}, {64, 64}, {1000000, 3000}, {3000, 3000}, {5000, 4999}}) {
    uint64_t state = 42;
    std::vector<uint32_t> drawn(count);
    draw_distinct(state, range, count, drawn.data());
    const std::set<uint32_t> values(drawn.begin(), drawn.end());
    EXPECT_EQ(values.size(), static_cast<size_t>(count)) << "range " << range << " count " << count;
    EXPECT_LT(*values.rbegin(), range);
    uint64_t again_state = 42;
    std::vector<uint32_t> again(count);
    draw_distinct(again_state, range, count, again.data());
    EXPECT_EQ(again, drawn);
    EXPECT_EQ(again_state, state);
  }
}

}  // namespace
}  // namespace tsdg
