#include "dot_tiles.h"

#include <cstring>

namespace tsdg {

namespace {

// 16 floats; the compiler maps it onto one zmm, two ymm or four xmm registers
// depending on the target of the function that uses it.
typedef float Lanes __attribute__((vector_size(kPanelWidth * sizeof(float))));

// kTileRows rows against `width` adjacent panels: kTileRows * width
// accumulators, one load per panel and kTileRows broadcasts per dimension.
template <int width>
__attribute__((always_inline)) inline void dot_tile(const float* const* rows, const float* b,
                                                    int dim, float* out, int64_t out_stride) {
  const int64_t panel_floats = static_cast<int64_t>(kPanelWidth) * dim;
  Lanes acc[kTileRows][width];
  for (int r = 0; r < kTileRows; ++r) {
    for (int w = 0; w < width; ++w) acc[r][w] = Lanes{};
  }
  for (int p = 0; p < dim; ++p) {
    Lanes column[width];
    for (int w = 0; w < width; ++w) {
      std::memcpy(&column[w], b + w * panel_floats + static_cast<int64_t>(p) * kPanelWidth, sizeof(Lanes));
    }
    for (int r = 0; r < kTileRows; ++r) {
      const float x = rows[r][p];
      for (int w = 0; w < width; ++w) acc[r][w] += column[w] * x;
    }
  }
  for (int r = 0; r < kTileRows; ++r) {
    for (int w = 0; w < width; ++w) {
      std::memcpy(out + r * out_stride + w * kPanelWidth, &acc[r][w], sizeof(Lanes));
    }
  }
}

// The body shared by every ISA variant; inlined into each so that it is
// compiled for that variant's target. `width` panels are done at once where
// the target has registers for their accumulators.
template <int width>
__attribute__((always_inline)) inline void dot_tiles_body(const float* const* a, int64_t a_rows,
                                                          const float* packed, int64_t panels,
                                                          int dim, float* out,
                                                          int64_t out_stride) {
  const int64_t panel_floats = static_cast<int64_t>(kPanelWidth) * dim;
  int64_t panel = 0;
  for (; panel + width <= panels; panel += width) {
    for (int64_t row = 0; row < a_rows; row += kTileRows) {
      dot_tile<width>(a + row, packed + panel * panel_floats, dim,
                      out + row * out_stride + panel * kPanelWidth, out_stride);
    }
  }
  for (; panel < panels; ++panel) {
    for (int64_t row = 0; row < a_rows; row += kTileRows) {
      dot_tile<1>(a + row, packed + panel * panel_floats, dim,
                  out + row * out_stride + panel * kPanelWidth, out_stride);
    }
  }
}

__attribute__((target("avx512f"))) void dot_tiles_avx512(const float* const* a, int64_t a_rows,
                                                         const float* packed, int64_t panels,
                                                         int dim, float* out,
                                                         int64_t out_stride) {
  dot_tiles_body<2>(a, a_rows, packed, panels, dim, out, out_stride);
}

__attribute__((target("avx2,fma"))) void dot_tiles_avx2(const float* const* a, int64_t a_rows,
                                                        const float* packed, int64_t panels,
                                                        int dim, float* out, int64_t out_stride) {
  dot_tiles_body<1>(a, a_rows, packed, panels, dim, out, out_stride);
}

void dot_tiles_generic(const float* const* a, int64_t a_rows, const float* packed, int64_t panels,
                       int dim, float* out, int64_t out_stride) {
  dot_tiles_body<1>(a, a_rows, packed, panels, dim, out, out_stride);
}

typedef int32_t LaneIndex __attribute__((vector_size(kPanelWidth * sizeof(int32_t))));

// One butterfly stage of a 16 x 16 transpose: swaps bit `step` of the row
// index with bit `step` of the column index, for the rows i and i + step.
template <int step>
__attribute__((always_inline)) inline void transpose_stage(Lanes* m) {
#define L(c) (((c) & step) == 0 ? (c) : kPanelWidth + (c) - step)
#define H(c) (((c) & step) == 0 ? (c) + step : kPanelWidth + (c))
  const LaneIndex low = {L(0), L(1), L(2), L(3), L(4), L(5), L(6), L(7), L(8), L(9), L(10), L(11), L(12), L(13), L(14), L(15)};
  const LaneIndex high = {H(0), H(1), H(2), H(3), H(4), H(5), H(6), H(7), H(8), H(9), H(10), H(11), H(12), H(13), H(14), H(15)};
#undef L
#undef H
  for (int i = 0; i < kPanelWidth; ++i) {
    if (i & step) continue;
    const Lanes a = m[i], b = m[i + step];
    m[i] = __builtin_shuffle(a, b, low);
    m[i + step] = __builtin_shuffle(a, b, high);
  }
}

// Packs by 16 x 16 blocks transposed in registers: 16 loads, 64 shuffles and
// 16 stores per block instead of 256 scattered scalar stores.
__attribute__((always_inline)) inline void pack_body(const float* data, const uint32_t* ids,
                                                     int64_t n, int dim, float* out) {
  const int64_t padded = round_up(n, kPanelWidth);
  for (int64_t r0 = 0; r0 < padded; r0 += kPanelWidth) {
    const float* src[kPanelWidth];
    for (int r = 0; r < kPanelWidth; ++r) {
      const int64_t row = r0 + r;
      src[r] = row < n ? data + (ids ? static_cast<int64_t>(ids[row]) : row) * dim : nullptr;
    }
    float* dst = out + r0 * dim;
    int p = 0;
    for (; p + kPanelWidth <= dim; p += kPanelWidth) {
      Lanes m[kPanelWidth];
      for (int r = 0; r < kPanelWidth; ++r) {
        if (src[r]) {
          std::memcpy(&m[r], src[r] + p, sizeof(Lanes));
        } else {
          m[r] = Lanes{};
        }
      }
      transpose_stage<8>(m);
      transpose_stage<4>(m);
      transpose_stage<2>(m);
      transpose_stage<1>(m);
      std::memcpy(dst + static_cast<int64_t>(p) * kPanelWidth, m, sizeof(m));
    }
    for (; p < dim; ++p) {
      for (int r = 0; r < kPanelWidth; ++r) {
        dst[static_cast<int64_t>(p) * kPanelWidth + r] = src[r] ? src[r][p] : 0.0f;
      }
    }
  }
}

__attribute__((target("avx512f"))) void pack_avx512(const float* data, const uint32_t* ids,
                                                    int64_t n, int dim, float* out) {
  pack_body(data, ids, n, dim, out);
}

__attribute__((target("avx2,fma"))) void pack_avx2(const float* data, const uint32_t* ids,
                                                   int64_t n, int dim, float* out) {
  pack_body(data, ids, n, dim, out);
}

void pack_generic(const float* data, const uint32_t* ids, int64_t n, int dim, float* out) {
  pack_body(data, ids, n, dim, out);
}

using PackFn = void (*)(const float*, const uint32_t*, int64_t, int, float*);
using DotTilesFn = void (*)(const float* const*, int64_t, const float*, int64_t, int, float*, int64_t);

struct Variant {
  DotTilesFn fn;
  PackFn pack;
  const char* name;
};

const Variant& chosen_variant() {
  static const Variant variant = [] {
    // __builtin_cpu_supports also checks that the OS saves the wide registers.
    if (__builtin_cpu_supports("avx512f")) return Variant{dot_tiles_avx512, pack_avx512, "avx512"};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return Variant{dot_tiles_avx2, pack_avx2, "avx2"};
    }
    return Variant{dot_tiles_generic, pack_generic, "generic"};
  }();
  return variant;
}

}  // namespace

void pack_panels(const float* data, const uint32_t* ids, int64_t n, int dim, float* out) {
  chosen_variant().pack(data, ids, n, dim, out);
}

void dot_tiles(const float* const* a, int64_t a_rows, const float* packed, int64_t panels, int dim,
               float* out, int64_t out_stride) {
  chosen_variant().fn(a, a_rows, packed, panels, dim, out, out_stride);
}

const char* dot_tiles_variant() { return chosen_variant().name; }

}  // namespace tsdg
