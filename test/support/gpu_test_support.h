// Shared by the GPU tests: the GPU backend (created once, or absent), the CPU
// backend to compare with, and small clustered data sets.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "recall.h"
#include "synthetic.h"
#include "thread_pool.h"
#include "types.h"

namespace tsdg::gpu_testing {

struct GpuBackend {
  std::unique_ptr<Backend> backend;
  std::string message;
};

inline const GpuBackend& gpu() {
  static const GpuBackend instance = [] {
    char message[512] = {0};
    GpuBackend created;
    created.backend.reset(tsdg_cuda_create_backend(0, message, sizeof(message)));
    created.message = message;
    return created;
  }();
  return instance;
}

// Skips the test where no GPU is found (CI compiles and runs these without one).
#define TSDG_REQUIRE_GPU()                                                          \
  if (::tsdg::gpu_testing::gpu().backend == nullptr) {                             \
    GTEST_SKIP() << "no usable GPU: " << ::tsdg::gpu_testing::gpu().message;        \
  }                                                                                 \
  Backend& gpu_backend = *::tsdg::gpu_testing::gpu().backend

inline ThreadPool& cpu_pool() {
  static ThreadPool pool;
  return pool;
}

inline RunControl cpu_control() {
  RunControl control;
  control.pool = &cpu_pool();
  return control;
}

inline SyntheticSpec clustered_spec(int64_t rows, int dim, int clusters, uint64_t seed) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.dim = dim;
  spec.clusters = clusters;
  spec.intrinsic_dim = dim < 12 ? dim : 12;
  spec.seed = seed;
  return spec;
}

inline double graph_recall(const KnnGraph& found, const KnnGraph& exact, int at) {
  return recall_at(found.ids.data(), found.k, exact.ids.data(), exact.k, found.nodes, at);
}

}  // namespace tsdg::gpu_testing
