// What the C interface's tests share: the parameters of their small builds
// and merges, and the check that a layer a build or merge wrote is the one
// tsdg_build_layer builds.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tsdg_capi.h"
#include "types.h"

namespace tsdg {
namespace testing {

// Two threads, so that the CPU's results are the same from one run to the next.
inline TsdgBuildParams capi_test_params(int degree) {
  TsdgBuildParams params;
  tsdg_build_params_default(&params);
  params.degree = degree;
  params.build_k = degree;
  params.threads = 2;
  return params;
}

// A layer a build or merge wrote is the one tsdg_build_layer builds from its rows.
inline void expect_layer_of(const Matrix& data, const TsdgBuildParams& params,
                            const std::vector<uint32_t>& layer_ids, const std::vector<uint8_t>& layer_lambdas) {
  std::vector<uint32_t> built_ids(layer_ids.size());
  std::vector<uint8_t> built_lambdas(layer_ids.size());
  TsdgError error;
  ASSERT_EQ(tsdg_build_layer(nullptr, data.values.data(), data.rows, data.dim, TSDG_METRIC_L2, &params,
                             built_ids.data(), built_lambdas.data(), nullptr, nullptr, &error),
            TSDG_OK)
      << error.message;
  EXPECT_EQ(layer_ids, built_ids);
  EXPECT_EQ(layer_lambdas, built_lambdas);
}

}  // namespace testing
}  // namespace tsdg
