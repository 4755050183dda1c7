#include "half_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 4096;
// The largest magnitude is scaled below 2^kLargestExponent; half precision
// overflows past 65504.
constexpr int kLargestExponent = 14;
// Keeps the scale and its inverse normal floats whatever the rows hold.
constexpr int kExponentLimit = 100;

// The largest |value| of count values, as the bits of a non-negative float,
// whose order as unsigned integers is that of the floats.
__global__ void largest_magnitude_kernel(const float* values, int64_t count, unsigned* largest_bits) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  float largest = 0.0f;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    largest = fmaxf(largest, fabsf(values[i]));
  }
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
    largest = fmaxf(largest, __shfl_xor_sync(kFullMask, largest, offset));
  }
  if (lane_id() == 0) atomicMax(largest_bits, __float_as_uint(largest));
}

__global__ void scaled_half_rows_kernel(const float* rows, int64_t nodes, int dim, int stride, float scale,
                                        __half* out) {
  const int64_t total = nodes * stride;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t row = i / stride;
    const int column = static_cast<int>(i % stride);
    out[i] = __float2half_rn(column < dim ? rows[row * dim + column] * scale : 0.0f);
  }
}

unsigned blocks_for(int64_t items) {
  return static_cast<unsigned>(std::clamp<int64_t>((items + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

HalfRowsCopy::HalfRowsCopy(const float* rows, int64_t nodes, int dim, cudaStream_t stream)
    : values_(bytes_for(nodes, dim) / sizeof(__half)), stride_(half_row_stride(dim)) {
  DeviceBuffer<unsigned> largest_bits(1);
  TSDG_CUDA_CHECK(cudaMemsetAsync(largest_bits.data(), 0, sizeof(unsigned), stream));
  const int64_t count = nodes * dim;
  largest_magnitude_kernel<<<blocks_for(count), kThreads, 0, stream>>>(rows, count, largest_bits.data());
  check_launch("largest_magnitude_kernel");
  unsigned bits = 0;
  copy_to_host(&bits, largest_bits.data(), 1, stream);
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream));
  float largest = 0.0f;
  std::memcpy(&largest, &bits, sizeof(largest));
  int exponent = 0;  // largest < 2^exponent
  if (largest > 0.0f) std::frexp(largest, &exponent);
  const int shift = std::clamp(kLargestExponent - exponent, -kExponentLimit, kExponentLimit);
  const float scale = std::ldexp(1.0f, shift);
  unscale_ = std::ldexp(1.0f, -shift);
  scaled_half_rows_kernel<<<blocks_for(nodes * stride_), kThreads, 0, stream>>>(rows, nodes, dim, stride_, scale,
                                                                                values_.data());
  check_launch("scaled_half_rows_kernel");
}

}  // namespace tsdg::cuda
