#include <gtest/gtest.h>

#include <cmath>

#include "synthetic.h"

namespace tsdg {
namespace {

double squared_distance(const float* a, const float* b, int dim) {
  double s = 0;
  for (int j = 0; j < dim; ++j) s += (double(a[j]) - b[j]) * (double(a[j]) - b[j]);
  return s;
}

TEST(Synthetic, DeterministicBySeed) {
  SyntheticSpec spec;
  spec.rows = 500;
  spec.dim = 24;
  const Matrix a = make_clustered(spec);
  const Matrix b = make_clustered(spec);
  EXPECT_EQ(a.rows, 500);
  EXPECT_EQ(a.dim, 24);
  EXPECT_EQ(a.values, b.values);
  spec.seed = 2;
  EXPECT_NE(make_clustered(spec).values, a.values);
}

TEST(Synthetic, QueriesComeFromTheSameMixture) {
  SyntheticSpec spec;
  spec.rows = 2000;
  spec.dim = 32;
  spec.clusters = 8;
  spec.spread = 0.05f;  // well separated
  spec.noise = 0.0f;
  const Matrix data = make_clustered(spec);
  const Matrix queries = make_clustered_queries(spec, 50, 99);
  const Matrix other = make_clustered_queries(spec, 50, 100);
  EXPECT_NE(queries.values, other.values);
  // Each query lies close to some data point: within its cluster's radius,
  // far below the spacing of the centers (sqrt(2 * dim) = 8).
  for (int64_t q = 0; q < queries.rows; ++q) {
    double best = 1e30;
    for (int64_t i = 0; i < data.rows; ++i) best = std::min(best, squared_distance(queries.row(q), data.row(i), 32));
    EXPECT_LT(std::sqrt(best), 0.05 * 8 * 2);
  }
}

TEST(Synthetic, ClustersSpanTheirIntrinsicDimension) {
  SyntheticSpec spec;
  spec.rows = 400;
  spec.dim = 20;
  spec.clusters = 1;
  spec.intrinsic_dim = 3;
  spec.noise = 0.0f;
  const Matrix data = make_clustered(spec);
  // With one cluster and no noise the rows minus their mean span exactly 3
  // directions: Gram-Schmidt over them finds 3, and leaves nothing of the rest.
  std::vector<double> mean(20, 0.0);
  for (int64_t i = 0; i < data.rows; ++i)
    for (int j = 0; j < 20; ++j) mean[j] += data.row(i)[j] / double(data.rows);
  std::vector<std::vector<double>> basis;
  double max_residual = 0;
  for (int64_t i = 0; i < data.rows; ++i) {
    std::vector<double> v(20);
    for (int j = 0; j < 20; ++j) v[j] = data.row(i)[j] - mean[j];
    for (const auto& b : basis) {
      double dot = 0;
      for (int j = 0; j < 20; ++j) dot += v[j] * b[j];
      for (int j = 0; j < 20; ++j) v[j] -= dot * b[j];
    }
    double norm = 0;
    for (double x : v) norm += x * x;
    norm = std::sqrt(norm);
    if (basis.size() < 4 && norm > 1e-3) {
      for (double& x : v) x /= norm;
      basis.push_back(v);
    } else {
      max_residual = std::max(max_residual, norm);
    }
  }
  EXPECT_EQ(basis.size(), 3u);
  EXPECT_LT(max_residual, 1e-3);
}

TEST(Synthetic, RejectsBadSpecs) {
  SyntheticSpec spec;
  spec.rows = 10;
  spec.dim = 0;
  EXPECT_THROW(make_clustered(spec), Error);
  spec.dim = 4;
  spec.clusters = 0;
  EXPECT_THROW(make_clustered(spec), Error);
}

}  // namespace
}  // namespace tsdg
