// Optional timing of the phases of a GPU algorithm, printed to stderr when
// the environment sets TSDG_GPU_TRACE (for profiling runs; off by default, so
// normal runs add no synchronization).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace tsdg::cuda {

class PhaseTrace {
 public:
  // wanted: false for calls too small or too many to print (single searches).
  PhaseTrace(const char* algorithm, cudaStream_t stream, bool wanted = true)
      : algorithm_(algorithm), stream_(stream), enabled_(wanted && std::getenv("TSDG_GPU_TRACE") != nullptr) {
    if (enabled_) start_ = now();
  }

  // Waits for the stream and prints the time since the previous mark.
  void mark(const char* phase, long long detail = -1) {
    if (!enabled_) return;
    cudaStreamSynchronize(stream_);
    const double t = now();
    if (detail >= 0) {
      std::fprintf(stderr, "[gpu-trace] %s %-28s %8.2f ms  (%lld)\n", algorithm_, phase, (t - start_) * 1e3, detail);
    } else {
      std::fprintf(stderr, "[gpu-trace] %s %-28s %8.2f ms\n", algorithm_, phase, (t - start_) * 1e3);
    }
    start_ = t;
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  const char* algorithm_;
  cudaStream_t stream_;
  bool enabled_;
  double start_ = 0.0;
};

}  // namespace tsdg::cuda
