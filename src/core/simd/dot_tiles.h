// Dense blocks of dot products, the matrix-product core of brute force
// (Garcia et al., 2010: ||x||^2 + ||y||^2 - 2 x.y) and of GNND's cross-matching.
// One register-blocked micro-kernel (kTileRows rows of A against one panel of
// kPanelWidth packed columns of B), compiled for AVX-512, AVX2+FMA and the
// baseline ISA, the best one chosen once at first use.
#pragma once

#include <cstdint>

namespace tsdg {

constexpr int kTileRows = 6;
constexpr int kPanelWidth = 16;

inline int64_t round_up(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// Floats needed to pack n rows of dim values into panels.
inline int64_t packed_panels_size(int64_t n, int dim) { return round_up(n, kPanelWidth) * dim; }

// Packs rows into panels of kPanelWidth columns: value p of row r goes to
// out[(r / W) * W * dim + p * W + r % W]. Rows past n up to the next multiple
// of W are zero. ids == nullptr packs rows 0..n-1 of data; otherwise the rows
// data + ids[i] * dim.
void pack_panels(const float* data, const uint32_t* ids, int64_t n, int dim, float* out);

// out[i * out_stride + j] = dot(a[i], packed column j) for i < a_rows and
// j < panels * kPanelWidth. a holds a_rows row pointers, a_rows a multiple of
// kTileRows (pad with pointers to a zero row); packed comes from pack_panels.
void dot_tiles(const float* const* a, int64_t a_rows, const float* packed, int64_t panels,
               int dim, float* out, int64_t out_stride);

// The name of the kernel variant in use ("avx512", "avx2", "generic").
const char* dot_tiles_variant();

}  // namespace tsdg
