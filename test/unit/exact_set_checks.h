// What an exact set's search must answer, whichever backend keeps the rows:
// the exact k nearest of every row appended since the last clear, checked
// against a float64 brute force. Shared by the CPU unit tests and the GPU
// tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "backend.h"
#include "distance.h"
#include "types.h"

namespace tsdg {
namespace testing {

// Rows uniform in [-1, 1): distances tie only by accident, so the answer's
// ids are the reference's. Normalized for cosine, which the caller does.
inline Matrix uniform_rows(int64_t rows, int dim, uint64_t seed, Metric metric) {
  Matrix m(rows, dim);
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (float& v : m.values) v = value(random);
  if (metric == Metric::Cosine) normalize_rows(m.values.data(), m.rows, m.dim);
  return m;
}

// all followed by piece: the rows an exact set holds after piece's append.
inline void append_rows(Matrix& all, const Matrix& piece) {
  all.values.insert(all.values.end(), piece.values.begin(), piece.values.end());
  all.rows += piece.rows;
  all.dim = piece.dim;
}

inline double reference_distance(Metric metric, const float* a, const float* b, int dim) {
  double l2 = 0.0, ip = 0.0;
  for (int i = 0; i < dim; ++i) {
    l2 += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    ip += static_cast<double>(a[i]) * b[i];
  }
  return metric == Metric::L2 ? l2 : metric == Metric::InnerProduct ? -ip : 1.0 - ip;
}

// The k nearest rows of base (fewer when base has fewer), ascending.
inline std::vector<std::pair<double, uint32_t>> reference_knn(MatrixView base, const float* query,
                                                              Metric metric, int k) {
  std::vector<std::pair<double, uint32_t>> all(base.rows);
  for (int64_t i = 0; i < base.rows; ++i) {
    all[i] = {reference_distance(metric, query, base.row(i), base.dim), static_cast<uint32_t>(i)};
  }
  const size_t kept = std::min<size_t>(k, all.size());
  std::partial_sort(all.begin(), all.begin() + kept, all.end());
  all.resize(kept);
  return all;
}

// The float rounding of a distance between rows of these sets: the norms
// trick (||q||^2 + ||b||^2 - 2 q.b) loses about eps * (||q||^2 + ||b||^2).
inline double distance_tolerance(MatrixView base, MatrixView queries) {
  double largest = 0.0;
  for (const MatrixView rows : {base, queries}) {
    for (int64_t i = 0; i < rows.rows; ++i) {
      largest = std::max(largest, -reference_distance(Metric::InnerProduct, rows.row(i), rows.row(i), rows.dim));
    }
  }
  return 1e-5 * std::max(1.0, 2.0 * largest);
}

// ids / dists (queries.rows * k) against the reference over base: the
// distance at every rank, the id where no other row comes within rounding of
// it, and padding (kInvalidId / +inf) past base's rows.
inline void expect_exact_knn(MatrixView base, MatrixView queries, Metric metric, int k,
                             const uint32_t* ids, const float* dists) {
  const double tolerance = distance_tolerance(base, queries);
  for (int64_t q = 0; q < queries.rows; ++q) {
    const auto expected = reference_knn(base, queries.row(q), metric, k + 1);
    for (int j = 0; j < k; ++j) {
      const size_t at = static_cast<size_t>(q) * k + j;
      if (j >= base.rows) {
        ASSERT_EQ(ids[at], kInvalidId) << "query " << q << " rank " << j;
        ASSERT_TRUE(std::isinf(dists[at]) && dists[at] > 0) << "query " << q << " rank " << j;
        continue;
      }
      ASSERT_NEAR(dists[at], expected[j].first, tolerance) << "query " << q << " rank " << j;
      const bool clear_before = j == 0 || expected[j].first - expected[j - 1].first > 2 * tolerance;
      const bool clear_after = j + 1 >= static_cast<int>(expected.size()) ||
                               expected[j + 1].first - expected[j].first > 2 * tolerance;
      if (clear_before && clear_after) {
        ASSERT_EQ(ids[at], expected[j].second) << "query " << q << " rank " << j;
      }
    }
  }
}

// Searches set for queries and checks the answer against all, the rows it holds.
inline void expect_set_search_exact(ExactSet& set, const Matrix& all, const Matrix& queries,
                                    Metric metric, int k, const RunControl& control) {
  std::vector<uint32_t> ids(static_cast<size_t>(queries.rows) * k, 12345u);
  std::vector<float> dists(ids.size(), -1.0f);
  set.search(queries.view(), k, ids.data(), dists.data(), control);
  expect_exact_knn(MatrixView{all.values.data(), all.rows, queries.dim}, queries.view(), metric, k,
                   ids.data(), dists.data());
}

}  // namespace testing
}  // namespace tsdg
