// The metrics' comparison distances on the device, matching the CPU core:
// squared L2, -ip, and 1 - ip (cosine rows are normalized by the caller); no
// L1, which the CPU computes.
// Kernels accumulate a partial term over dimension tiles and finish once.
#pragma once

#include <type_traits>

#include "types.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {

// Per-dimension contribution: (a - b)^2 for L2, a * b for the inner products.
template <Metric M>
__device__ __forceinline__ float distance_term(float a, float b) {
  if constexpr (M == Metric::L2) {
    const float diff = a - b;
    return diff * diff;
  } else {
    return a * b;
  }
}

template <Metric M>
__device__ __forceinline__ float finish_distance(float accumulated) {
  if constexpr (M == Metric::L2) {
    return accumulated;
  } else if constexpr (M == Metric::InnerProduct) {
    return -accumulated;
  } else {
    return 1.0f - accumulated;
  }
}

// Distance between two rows, computed by one warp; every lane gets the result.
template <Metric M>
__device__ __forceinline__ float warp_distance(const float* a, const float* b, int dim) {
  float sum = 0.0f;
  for (int i = lane_id(); i < dim; i += kWarpSize) sum += distance_term<M>(a[i], b[i]);
  return finish_distance<M>(warp_sum(sum));
}

template <Metric M>
using MetricTag = std::integral_constant<Metric, M>;

// Calls body(MetricTag<M>{}) for the run-time metric, so each kernel is
// instantiated once per metric (the body reads decltype(tag)::value).
template <typename Body>
void dispatch_metric(Metric metric, Body&& body) {
  switch (metric) {
    case Metric::L2:
      body(MetricTag<Metric::L2>{});
      return;
    case Metric::InnerProduct:
      body(MetricTag<Metric::InnerProduct>{});
      return;
    case Metric::Cosine:
      body(MetricTag<Metric::Cosine>{});
      return;
    case Metric::L1:
      break;  // Backend::computes: the GPU backend takes no L1 index
  }
  throw Error(Status::InvalidArgument, std::string("the GPU backend does not compute ") + metric_name(metric) +
                                           " distances");
}

// Throws where the device has no form of metric's distance: L1, since the
// exact k-NN and the entry scoring are matrix products (Backend::computes).
inline void require_device_metric(Metric metric) {
  dispatch_metric(metric, [](auto) {});
}

}  // namespace tsdg::cuda
