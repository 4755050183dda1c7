#include "synthetic.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tsdg {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A small deterministic generator of uniform and normal variates.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform();  // in (0, 1], so the log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// The mixture fixed by a spec's seed. Distances are in units of the expected
// distance between two centers (sqrt(2 * dim) for unit normal centers), so that
// spread and noise mean the same thing in any dimension.
struct Mixture {
  int dim = 0;
  int intrinsic = 0;
  int clusters = 0;
  std::vector<double> centers;  // clusters x dim
  std::vector<double> bases;    // clusters x intrinsic x dim
  double cluster_sigma = 0.0;   // per intrinsic coordinate
  double noise_sigma = 0.0;     // per ambient coordinate
};

void check_spec(const SyntheticSpec& spec, int64_t rows) {
  if (rows < 0 || spec.dim <= 0 || spec.clusters <= 0 || spec.intrinsic_dim <= 0 ||
      !(spec.spread >= 0.0f) || !(spec.noise >= 0.0f)) {
    throw Error(Status::InvalidArgument,
                "synthetic spec needs rows >= 0, dim, clusters and intrinsic_dim > 0, "
                "spread and noise >= 0");
  }
}

Mixture make_mixture(const SyntheticSpec& spec) {
  Mixture m;
  m.dim = spec.dim;
  m.intrinsic = std::min(spec.intrinsic_dim, spec.dim);
  m.clusters = spec.clusters;
  Random random(spec.seed ^ 0x6d69787475726531ULL);
  m.centers.resize(static_cast<size_t>(m.clusters) * m.dim);
  for (double& c : m.centers) c = random.normal();
  if (spec.absolute_scale) {
    for (double& c : m.centers) c *= spec.spread;
    m.bases.resize(static_cast<size_t>(m.clusters) * m.intrinsic * m.dim);
    const double entry_sigma = 1.0 / std::sqrt(static_cast<double>(m.intrinsic));
    for (double& b : m.bases) b = random.normal() * entry_sigma;
    m.cluster_sigma = 1.0;
    m.noise_sigma = spec.noise;
    return m;
  }

  // Random Gaussian directions made orthonormal by Gram-Schmidt, so that every
  // cluster spans exactly `intrinsic` dimensions.
  m.bases.resize(static_cast<size_t>(m.clusters) * m.intrinsic * m.dim);
  for (int c = 0; c < m.clusters; ++c) {
    double* basis = m.bases.data() + static_cast<size_t>(c) * m.intrinsic * m.dim;
    for (int b = 0; b < m.intrinsic; ++b) {
      double* v = basis + static_cast<size_t>(b) * m.dim;
      for (;;) {
        for (int j = 0; j < m.dim; ++j) v[j] = random.normal();
        for (int prev = 0; prev < b; ++prev) {
          const double* u = basis + static_cast<size_t>(prev) * m.dim;
          double dot = 0.0;
          for (int j = 0; j < m.dim; ++j) dot += u[j] * v[j];
          for (int j = 0; j < m.dim; ++j) v[j] -= dot * u[j];
        }
        double norm = 0.0;
        for (int j = 0; j < m.dim; ++j) norm += v[j] * v[j];
        norm = std::sqrt(norm);
        if (norm > 1e-6) {
          for (int j = 0; j < m.dim; ++j) v[j] /= norm;
          break;
        }
      }
    }
  }
  const double spacing = std::sqrt(2.0 * m.dim);
  // A cluster's radius (sigma * sqrt(intrinsic)) is spread times the spacing;
  // the noise vector's length is noise times the spacing.
  m.cluster_sigma = spec.spread * spacing / std::sqrt(static_cast<double>(m.intrinsic));
  m.noise_sigma = spec.noise * spacing / std::sqrt(static_cast<double>(m.dim));
  return m;
}

Matrix draw(const Mixture& m, int64_t count, uint64_t seed) {
  Matrix out(count, m.dim);
  std::vector<double> point(m.dim);
  Random random(seed ^ 0x706f696e74730000ULL);
  for (int64_t i = 0; i < count; ++i) {
    const int c = static_cast<int>(random.next() % static_cast<uint64_t>(m.clusters));
    const double* center = m.centers.data() + static_cast<size_t>(c) * m.dim;
    const double* basis = m.bases.data() + static_cast<size_t>(c) * m.intrinsic * m.dim;
    std::copy(center, center + m.dim, point.begin());
    for (int b = 0; b < m.intrinsic; ++b) {
      const double z = random.normal() * m.cluster_sigma;
      const double* v = basis + static_cast<size_t>(b) * m.dim;
      for (int j = 0; j < m.dim; ++j) point[j] += z * v[j];
    }
    float* row = out.row(i);
    for (int j = 0; j < m.dim; ++j) {
      row[j] = static_cast<float>(point[j] + random.normal() * m.noise_sigma);
    }
  }
  return out;
}

}  // namespace

Matrix make_clustered(const SyntheticSpec& spec) {
  check_spec(spec, spec.rows);
  return draw(make_mixture(spec), spec.rows, spec.seed);
}

Matrix make_clustered_queries(const SyntheticSpec& spec, int64_t count, uint64_t query_seed) {
  check_spec(spec, count);
  return draw(make_mixture(spec), count, query_seed);
}

}  // namespace tsdg
