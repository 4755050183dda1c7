// Data and checks shared by the GNND and GGM tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "gnnd.h"
#include "recall.h"
#include "synthetic.h"
#include "types.h"

namespace tsdg {
namespace testing {

// 16 clusters on 8-dimensional subspaces: easy enough for small graphs to
// converge in a few iterations.
inline Matrix clustered_rows(int64_t rows, int dim, uint64_t seed) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.dim = dim;
  spec.clusters = 16;
  spec.intrinsic_dim = 8;
  spec.seed = seed;
  return make_clustered(spec);
}

// Rows [0, split) and [split, rows) with a GNND graph each (k 16, p 8; the
// second's ids local to it): what GGM and a merge's GGM join.
struct TwoSides {
  Matrix data;
  int64_t split = 0;
  KnnGraph first, second;
  GnndParams params;
};

inline TwoSides two_sides(int64_t rows, int64_t split, uint64_t seed, const RunControl& control) {
  TwoSides t;
  t.data = clustered_rows(rows, 24, seed);
  t.split = split;
  t.params.k = 16;
  t.params.samples = 8;
  t.first = gnnd_build(t.data.view().slice(0, split), Metric::L2, t.params, control);
  t.second = gnnd_build(t.data.view().slice(split, rows - split), Metric::L2, t.params, control);
  return t;
}

inline double graph_recall(const KnnGraph& found, const KnnGraph& exact, int at) {
  return recall_at(found.ids.data(), found.k, exact.ids.data(), exact.k, found.nodes, at);
}

// Every list sorted by distance, with no self edge, no duplicate and no id
// out of range (padding with kInvalidId allowed).
inline void expect_valid_lists(const KnnGraph& graph) {
  for (int64_t i = 0; i < graph.nodes; ++i) {
    std::set<uint32_t> seen;
    for (int j = 0; j < graph.k; ++j) {
      const uint32_t v = graph.list(i)[j];
      if (v == kInvalidId) continue;
      EXPECT_NE(v, static_cast<uint32_t>(i));
      EXPECT_LT(v, graph.nodes);
      EXPECT_TRUE(seen.insert(v).second) << "duplicate in list " << i;
      if (j > 0) {
        EXPECT_LE(graph.list_dists(i)[j - 1], graph.list_dists(i)[j]);
      }
    }
  }
}

}  // namespace testing
}  // namespace tsdg
