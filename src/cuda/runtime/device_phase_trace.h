// The phase trace of an algorithm on the device: each mark first waits for
// the algorithm's stream, so that a phase's time is its kernels' (normal
// runs, without TSDG_GPU_TRACE, add no synchronization).
#pragma once

#include <cuda_runtime.h>

#include "phase_trace.h"

namespace tsdg::cuda {

class PhaseTrace {
 public:
  PhaseTrace(const char* algorithm, cudaStream_t stream, bool wanted = true) : host_(algorithm, wanted), stream_(stream) {}

  void mark(const char* phase, long long detail = -1) {
    if (!host_.enabled()) return;
    cudaStreamSynchronize(stream_);
    host_.mark(phase, detail);
  }

 private:
  tsdg::PhaseTrace host_;
  cudaStream_t stream_;
};

}  // namespace tsdg::cuda
