// Optional timing of an algorithm's phases, printed to stderr when the
// environment sets TSDG_GPU_TRACE (for profiling runs of the GPU backend,
// whose builds and merges also spend time in host steps; off by default).
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace tsdg {

class PhaseTrace {
 public:
  // wanted: false for calls too small or too many to print (single searches).
  explicit PhaseTrace(const char* algorithm, bool wanted = true)
      : algorithm_(algorithm), enabled_(wanted && std::getenv("TSDG_GPU_TRACE") != nullptr) {
    if (enabled_) start_ = now();
  }

  bool enabled() const { return enabled_; }

  // Prints the time since the previous mark.
  void mark(const char* phase, long long detail = -1) {
    if (!enabled_) return;
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
  bool enabled_;
  double start_ = 0.0;
};

}  // namespace tsdg
