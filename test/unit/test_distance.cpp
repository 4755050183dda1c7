// Every distance kernel variant this CPU runs, checked against a naive
// double-precision loop on random data of odd sizes, at aligned and unaligned
// addresses.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "distance.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

const int kDims[] = {1, 3, 17, 128, 769, 1536};

// Float accumulation error grows with the magnitude of the terms, not of
// their (possibly cancelling) sum, so the tolerance is relative to sum |term|.
constexpr double kRelativeTolerance = 1e-5;

struct Reference {
  double value;
  double magnitude;  // sum of |term|: the scale of the rounding error
};

Reference naive_l2(const float* a, const float* b, int dim) {
  double s = 0;
  for (int i = 0; i < dim; i++) s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return {s, s};
}
Reference naive_ip(const float* a, const float* b, int dim) {
  double s = 0, m = 0;
  for (int i = 0; i < dim; i++) {
    s += double(a[i]) * b[i];
    m += std::fabs(double(a[i]) * b[i]);
  }
  return {s, m};
}
Reference naive_l1(const float* a, const float* b, int dim) {
  double s = 0;
  for (int i = 0; i < dim; i++) s += std::fabs(double(a[i]) - b[i]);
  return {s, s};
}

void expect_close(double got, Reference want, const std::string& what) {
  EXPECT_NEAR(got, want.value, kRelativeTolerance * want.magnitude + 1e-30) << what;
}

class DistanceKernelTest : public ::testing::TestWithParam<const DistanceKernels*> {
 protected:
  // Two vectors of dim values from N(0.3, 1), starting `offset` floats into
  // their buffers so unaligned loads are exercised too.
  void fill(int dim, int offset, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.3f, 1.0f);
    buf_a_.assign(dim + offset, 0.0f);
    buf_b_.assign(dim + offset, 0.0f);
    for (int i = 0; i < dim; i++) {
      buf_a_[offset + i] = normal(rng);
      buf_b_[offset + i] = normal(rng);
    }
    a_ = buf_a_.data() + offset;
    b_ = buf_b_.data() + offset;
  }

  std::vector<float> buf_a_, buf_b_;
  const float* a_ = nullptr;
  const float* b_ = nullptr;
};

TEST_P(DistanceKernelTest, MatchesNaiveDoubleLoop) {
  const DistanceKernels& k = *GetParam();
  for (int dim : kDims) {
    for (int offset : {0, 1, 3}) {
      fill(dim, offset, 1000u * dim + offset);
      const std::string where = std::string(k.name) + " dim=" + std::to_string(dim) +
                                " offset=" + std::to_string(offset);
      const Reference l2 = naive_l2(a_, b_, dim), ip = naive_ip(a_, b_, dim);
      expect_close(k.l2_squared(a_, b_, dim), l2, "l2_squared " + where);
      expect_close(k.inner_product(a_, b_, dim), ip, "inner_product " + where);
      expect_close(k.l1(a_, b_, dim), naive_l1(a_, b_, dim), "l1 " + where);
      expect_close(k.negative_inner_product(a_, b_, dim), {-ip.value, ip.magnitude},
                   "negative_inner_product " + where);
      expect_close(k.one_minus_inner_product(a_, b_, dim), {1.0 - ip.value, ip.magnitude + 1},
                   "one_minus_inner_product " + where);

      const double norm_a = naive_ip(a_, a_, dim).value, norm_b = naive_ip(b_, b_, dim).value;
      const double cosine = ip.value / std::sqrt(norm_a * norm_b);
      // d(1 - cos) is bounded by the relative errors of dot and both norms.
      const double cosine_scale = ip.magnitude / std::sqrt(norm_a * norm_b) + 1;
      expect_close(k.cosine(a_, b_, dim), {1.0 - cosine, cosine_scale}, "cosine " + where);
    }
  }
}

TEST_P(DistanceKernelTest, IdenticalVectorsAreAtDistanceZero) {
  const DistanceKernels& k = *GetParam();
  for (int dim : kDims) {
    fill(dim, 0, 7u + dim);
    EXPECT_EQ(k.l2_squared(a_, a_, dim), 0.0f) << k.name << " dim=" << dim;
    EXPECT_EQ(k.l1(a_, a_, dim), 0.0f) << k.name << " dim=" << dim;
    EXPECT_NEAR(k.cosine(a_, a_, dim), 0.0f, 1e-6f) << k.name << " dim=" << dim;
    EXPECT_GE(k.cosine(a_, a_, dim), 0.0f) << "cosine is clamped to [0, 2]";
  }
}

TEST_P(DistanceKernelTest, CosineOfZeroVectorIsNaN) {
  const DistanceKernels& k = *GetParam();
  std::vector<float> zero(17, 0.0f), one(17, 1.0f);
  EXPECT_TRUE(std::isnan(k.cosine(zero.data(), one.data(), 17))) << k.name;
  EXPECT_TRUE(std::isnan(k.cosine(one.data(), zero.data(), 17))) << k.name;
}

TEST_P(DistanceKernelTest, ZeroDimensionsGiveZero) {
  const DistanceKernels& k = *GetParam();
  float x = 1.0f;
  EXPECT_EQ(k.l2_squared(&x, &x, 0), 0.0f);
  EXPECT_EQ(k.inner_product(&x, &x, 0), 0.0f);
  EXPECT_EQ(k.l1(&x, &x, 0), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(Variants, DistanceKernelTest,
                         ::testing::ValuesIn(supported_distance_kernels()),
                         [](const ::testing::TestParamInfo<const DistanceKernels*>& info) {
                           return std::string(info.param->name);
                         });

TEST(DistanceKernels, GenericIsAlwaysAvailableAndBestIsInUse) {
  const auto& supported = supported_distance_kernels();
  ASSERT_FALSE(supported.empty());
  EXPECT_STREQ(supported.back()->name, "generic");
  EXPECT_EQ(&distance_kernels(), supported.front());
  EXPECT_STREQ(tsdg_distance_kernel_name(), distance_kernels().name);
}

TEST(DistanceCApi, EntryPointsMatchNaiveLoops) {
  const int dim = 769;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(dim), b(dim);
  for (int i = 0; i < dim; i++) {
    a[i] = uniform(rng);
    b[i] = uniform(rng);
  }
  const Reference l2 = naive_l2(a.data(), b.data(), dim);
  const Reference ip = naive_ip(a.data(), b.data(), dim);
  const Reference norm = naive_ip(a.data(), a.data(), dim);
  expect_close(tsdg_l2_squared_distance(a.data(), b.data(), dim), l2, "l2");
  expect_close(tsdg_inner_product(a.data(), b.data(), dim), ip, "ip");
  expect_close(tsdg_l1_distance(a.data(), b.data(), dim), naive_l1(a.data(), b.data(), dim),
               "l1");
  expect_close(tsdg_norm_squared(a.data(), dim), norm, "norm");
  const double cosine =
      ip.value / std::sqrt(norm.value * naive_ip(b.data(), b.data(), dim).value);
  EXPECT_NEAR(tsdg_cosine_distance(a.data(), b.data(), dim), 1.0 - cosine, 1e-5);

  expect_close(tsdg_metric_distance(TSDG_METRIC_L2, a.data(), b.data(), dim), l2, "metric l2");
  expect_close(tsdg_metric_distance(TSDG_METRIC_INNER_PRODUCT, a.data(), b.data(), dim),
               {-ip.value, ip.magnitude}, "metric ip");
  expect_close(tsdg_metric_distance(TSDG_METRIC_COSINE, a.data(), b.data(), dim),
               {1.0 - ip.value, ip.magnitude + 1}, "metric cosine");
}

TEST(DistanceMetric, MetricDistanceFollowsTheMetric) {
  const float a[3] = {1, 2, 3}, b[3] = {4, 0, -1};
  EXPECT_FLOAT_EQ(metric_distance(Metric::L2, a, b, 3), 9 + 4 + 16);
  EXPECT_FLOAT_EQ(metric_distance(Metric::InnerProduct, a, b, 3), -(4 + 0 - 3));
  EXPECT_FLOAT_EQ(metric_distance(Metric::Cosine, a, b, 3), 1 - (4 + 0 - 3));
  EXPECT_FLOAT_EQ(metric_distance_fn(Metric::L2)(a, b, 3), 29);
}

TEST(DistanceRows, NormalizeRowsAndRowNorms) {
  const int dim = 17, n = 5;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> rows(n * dim);
  for (float& v : rows) v = normal(rng);
  for (int j = 0; j < dim; j++) rows[2 * dim + j] = 0.0f;  // a zero row stays zero

  std::vector<float> norms(n);
  row_norms_squared(MatrixView{rows.data(), n, dim}, norms.data());
  for (int i = 0; i < n; i++) {
    const Reference want = naive_ip(&rows[i * dim], &rows[i * dim], dim);
    expect_close(norms[i], want, "row " + std::to_string(i));
  }

  normalize_rows(rows.data(), n, dim);
  for (int i = 0; i < n; i++) {
    const double norm = naive_ip(&rows[i * dim], &rows[i * dim], dim).value;
    if (i == 2) {
      EXPECT_EQ(norm, 0.0);
    } else {
      EXPECT_NEAR(norm, 1.0, 1e-5) << "row " << i;
    }
  }
}

}  // namespace
}  // namespace tsdg
