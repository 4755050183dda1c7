// The random long-range candidates of a row (long_range.h), drawn the same
// way on the host and in the GPU backend's kernels: a splitmix64 hash of the
// seed, the row and the draw's index, so that both backends widen a list with
// the same rows.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define TSDG_HOST_DEVICE __host__ __device__
#else
#define TSDG_HOST_DEVICE
#endif

namespace tsdg {

// The draw-th random candidate of row among rows rows (may be the row itself).
TSDG_HOST_DEVICE inline uint32_t random_candidate(uint64_t seed, int64_t row, int draw, int64_t rows) {
  uint64_t z = seed ^ (static_cast<uint64_t>(row) * 64 + static_cast<uint64_t>(draw)) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<uint32_t>(z % static_cast<uint64_t>(rows));
}

}  // namespace tsdg

#undef TSDG_HOST_DEVICE
