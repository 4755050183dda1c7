// Distance kernels for C++ callers. One implementation per metric, the SIMD
// variant (AVX-512, AVX2+FMA or generic) chosen once at first use. The C
// entry points in tsdg_capi.h call the same functions.
#pragma once

#include "types.h"

namespace tsdg {

using DistanceFn = float (*)(const float* a, const float* b, int dim);
// Float sums, the final 1 - dot / sqrt(|a|^2 |b|^2) in double, like pgvector.
using CosineDistanceFn = double (*)(const float* a, const float* b, int dim);

// The kernel table for this CPU, resolved once.
struct DistanceKernels {
  DistanceFn l2_squared;
  DistanceFn inner_product;
  DistanceFn l1;
  const char* name;
  CosineDistanceFn cosine;             // 1 - cos(a, b) of raw rows; NaN for a zero row
  DistanceFn negative_inner_product;   // Metric::InnerProduct
  DistanceFn one_minus_inner_product;  // Metric::Cosine on normalized rows
};
const DistanceKernels& distance_kernels();
// Every variant this CPU can run, best (the one distance_kernels() uses) first,
// generic last; for tests and benchmarks that compare the variants.
const std::vector<const DistanceKernels*>& supported_distance_kernels();

// The comparison distance of a metric: squared L2, -ip, 1 - ip (rows of a
// cosine set are normalized beforehand), or L1.
float metric_distance(Metric metric, const float* a, const float* b, int dim);
DistanceFn metric_distance_fn(Metric metric);

// Normalize every row in place (cosine); zero rows stay zero.
void normalize_rows(float* rows, int64_t n, int dim);
// Squared norms of every row.
void row_norms_squared(MatrixView rows, float* out);

}  // namespace tsdg
