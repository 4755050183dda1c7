#include <gtest/gtest.h>

#include <algorithm>

#include "bruteforce.h"
#include "knn_graph_test_util.h"
#include "ggm.h"
#include "gnnd.h"
#include "recall.h"
#include "synthetic.h"
#include "thread_pool.h"

namespace tsdg {
namespace {

using testing::clustered_rows;
using testing::two_sides;
using testing::TwoSides;
using testing::expect_valid_lists;
using testing::graph_recall;

struct MergeCase : TwoSides {
  KnnGraph exact;
};

MergeCase make_case(int64_t rows, int64_t split, const RunControl& control) {
  MergeCase c{two_sides(rows, split, 21, control), {}};
  c.exact = exact_knn_graph(c.data.view(), Metric::L2, 10, control);
  return c;
}

TEST(Ggm, MergedRecallCloseToDirectBuild) {
  ThreadPool pool(2);
  RunControl control;
  control.pool = &pool;
  const MergeCase c = make_case(6000, 3500, control);
  const KnnGraph merged = ggm_merge(c.data.view(), c.split, c.first, c.second, Metric::L2, c.params, control);
  const KnnGraph direct = gnnd_build(c.data.view(), Metric::L2, c.params, control);
  ASSERT_EQ(merged.nodes, 6000);
  ASSERT_EQ(merged.k, 16);
  const double merged_recall = graph_recall(merged, c.exact, 10);
  EXPECT_GE(merged_recall, graph_recall(direct, c.exact, 10) - 0.02);
  EXPECT_GE(merged_recall, 0.93);
  // Lists are full, sorted and free of duplicates, and hold neighbors from
  // both sides.
  expect_valid_lists(merged);
  int64_t cross = 0;
  for (int64_t i = 0; i < merged.nodes; ++i) {
    for (int j = 0; j < merged.k; ++j) {
      const uint32_t v = merged.list(i)[j];
      ASSERT_NE(v, kInvalidId);
      cross += (i < c.split) != (v < c.split);
    }
  }
  EXPECT_GT(cross, merged.nodes);
}

TEST(Ggm, SameSeedSameGraphOnAnyThreadCount) {
  ThreadPool pool(2);
  RunControl threaded;
  threaded.pool = &pool;
  const MergeCase c = make_case(2000, 1000, threaded);
  const KnnGraph a = ggm_merge(c.data.view(), c.split, c.first, c.second, Metric::L2, c.params, RunControl{});
  const KnnGraph b = ggm_merge(c.data.view(), c.split, c.first, c.second, Metric::L2, c.params, threaded);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.dists, b.dists);
}

TEST(Ggm, OneEmptySideKeepsTheOtherGraph) {
  const MergeCase c = make_case(1000, 1000, RunControl{});
  const KnnGraph empty;
  const KnnGraph merged = ggm_merge(c.data.view(), 1000, c.first, empty, Metric::L2, c.params, RunControl{});
  EXPECT_EQ(merged.ids, c.first.ids);
}

// Algorithm 3 joins only pairs across the two sides: with side graphs that are
// far from converged (one GNND iteration), the merge still finds the other
// side's neighbors, but every neighbor on a row's own side must come from its
// own side's input list, since no join ever offers one.
TEST(Ggm, JoinsOnlyAcrossSides) {
  const Matrix data = clustered_rows(3000, 24, 22);
  const int64_t split = 1400;
  GnndParams rough;
  rough.k = 16;
  rough.samples = 8;
  rough.iterations = 1;
  const KnnGraph first = gnnd_build(data.view().slice(0, split), Metric::L2, rough, RunControl{});
  const KnnGraph second = gnnd_build(data.view().slice(split, 3000 - split), Metric::L2, rough, RunControl{});
  GnndParams params = rough;
  params.iterations = 12;
  const KnnGraph merged = ggm_merge(data.view(), split, first, second, Metric::L2, params, RunControl{});
  expect_valid_lists(merged);
  int64_t cross = 0;
  for (int64_t i = 0; i < merged.nodes; ++i) {
    const bool in_first = i < split;
    const KnnGraph& own = in_first ? first : second;
    const int64_t offset = in_first ? 0 : split;
    const uint32_t* own_list = own.list(i - offset);
    for (int j = 0; j < merged.k; ++j) {
      const uint32_t v = merged.list(i)[j];
      if ((v < split) != in_first) {
        ++cross;
        continue;
      }
      const uint32_t local = static_cast<uint32_t>(v - offset);
      EXPECT_NE(std::find(own_list, own_list + own.k, local), own_list + own.k)
          << "row " << i << " gained own-side neighbor " << v;
    }
  }
  // Both sides hold about half of every row's true neighbors.
  EXPECT_GT(cross, merged.nodes * merged.k / 4);
}

TEST(Ggm, RejectsMismatchedGraphs) {
  const MergeCase c = make_case(1000, 400, RunControl{});
  EXPECT_THROW(ggm_merge(c.data.view(), 500, c.first, c.second, Metric::L2, c.params, RunControl{}), Error);
  EXPECT_THROW(ggm_merge(c.data.view(), 400, c.second, c.first, Metric::L2, c.params, RunControl{}), Error);
}

TEST(Ggm, Cancels) {
  const MergeCase c = make_case(2000, 1000, RunControl{});
  std::atomic<bool> cancel{true};
  RunControl control;
  control.cancel = &cancel;
  EXPECT_THROW(ggm_merge(c.data.view(), c.split, c.first, c.second, Metric::L2, c.params, control), Error);
}

}  // namespace
}  // namespace tsdg
