// The walks' copy of the rows in half precision, made on the device from
// the float rows.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "device_memory.h"

namespace tsdg::cuda {

// The rows a walk reads: row i is half_rows[i * stride, (i + 1) * stride),
// its values times scale, zero past dim. stride is dim rounded up to 8, so
// that a row is read 16 bytes at a time; scale is a power of two that puts
// the largest value of the rows near 2^14, where half precision keeps the
// most digits without overflow.
struct HalfRows {
  const __half* values;
  int stride;
  float unscale;  // 1 / scale, exact
};

// dim rounded up to a whole number of 16-byte reads of half values.
__host__ __device__ constexpr int half_row_stride(int dim) { return (dim + 7) & ~7; }

class HalfRowsCopy {
 public:
  HalfRowsCopy() = default;
  // Half values of the nodes * dim float rows (device), scaled by the power
  // of two that puts their largest magnitude below 2^14.
  HalfRowsCopy(const float* rows, int64_t nodes, int dim, cudaStream_t stream);

  HalfRows view() const { return HalfRows{values_.data(), stride_, unscale_}; }
  size_t bytes() const { return values_.bytes(); }
  // Device bytes of the copy of nodes rows of dim values.
  static size_t bytes_for(int64_t nodes, int dim) {
    return static_cast<size_t>(nodes) * half_row_stride(dim) * sizeof(__half);
  }

 private:
  DeviceBuffer<__half> values_;
  int stride_ = 0;
  float unscale_ = 1.0f;
};

}  // namespace tsdg::cuda
