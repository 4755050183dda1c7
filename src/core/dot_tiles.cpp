#include "dot_tiles.h"

#include <cstring>

namespace tsdg {

namespace {

// 16 floats; the compiler maps it onto one zmm, two ymm or four xmm registers
// depending on the target of the function that uses it.
typedef float Lanes __attribute__((vector_size(kPanelWidth * sizeof(float))));

// The body shared by every ISA variant; inlined into each so that it is
// compiled for that variant's target.
__attribute__((always_inline)) inline void dot_tiles_body(const float* a, int64_t a_rows,
                                                          const float* packed, int64_t panels,
                                                          int dim, float* out,
                                                          int64_t out_stride) {
  const int64_t panel_floats = static_cast<int64_t>(kPanelWidth) * dim;
  for (int64_t panel = 0; panel < panels; ++panel) {
    const float* b = packed + panel * panel_floats;
    for (int64_t row = 0; row < a_rows; row += kTileRows) {
      const float* a0 = a + row * dim;
      Lanes acc[kTileRows];
      for (int r = 0; r < kTileRows; ++r) acc[r] = Lanes{};
      for (int p = 0; p < dim; ++p) {
        Lanes column;
        std::memcpy(&column, b + static_cast<int64_t>(p) * kPanelWidth, sizeof(Lanes));
        for (int r = 0; r < kTileRows; ++r) acc[r] += column * a0[static_cast<int64_t>(r) * dim + p];
      }
      for (int r = 0; r < kTileRows; ++r) {
        std::memcpy(out + (row + r) * out_stride + panel * kPanelWidth, &acc[r], sizeof(Lanes));
      }
    }
  }
}

__attribute__((target("avx512f"))) void dot_tiles_avx512(const float* a, int64_t a_rows,
                                                         const float* packed, int64_t panels,
                                                         int dim, float* out,
                                                         int64_t out_stride) {
  dot_tiles_body(a, a_rows, packed, panels, dim, out, out_stride);
}

__attribute__((target("avx2,fma"))) void dot_tiles_avx2(const float* a, int64_t a_rows,
                                                        const float* packed, int64_t panels,
                                                        int dim, float* out, int64_t out_stride) {
  dot_tiles_body(a, a_rows, packed, panels, dim, out, out_stride);
}

void dot_tiles_generic(const float* a, int64_t a_rows, const float* packed, int64_t panels,
                       int dim, float* out, int64_t out_stride) {
  dot_tiles_body(a, a_rows, packed, panels, dim, out, out_stride);
}

using DotTilesFn = void (*)(const float*, int64_t, const float*, int64_t, int, float*, int64_t);

struct Variant {
  DotTilesFn fn;
  const char* name;
};

const Variant& chosen_variant() {
  static const Variant variant = [] {
    // __builtin_cpu_supports also checks that the OS saves the wide registers.
    if (__builtin_cpu_supports("avx512f")) return Variant{dot_tiles_avx512, "avx512"};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
      return Variant{dot_tiles_avx2, "avx2"};
    }
    return Variant{dot_tiles_generic, "generic"};
  }();
  return variant;
}

}  // namespace

void pack_panels(const float* data, const uint32_t* ids, int64_t n, int dim, float* out) {
  const int64_t padded = round_up(n, kPanelWidth);
  for (int64_t r = 0; r < padded; ++r) {
    float* dst = out + (r / kPanelWidth) * kPanelWidth * dim + r % kPanelWidth;
    if (r >= n) {
      for (int p = 0; p < dim; ++p) dst[static_cast<int64_t>(p) * kPanelWidth] = 0.0f;
      continue;
    }
    const float* src = data + (ids ? static_cast<int64_t>(ids[r]) : r) * dim;
    for (int p = 0; p < dim; ++p) dst[static_cast<int64_t>(p) * kPanelWidth] = src[p];
  }
}

void dot_tiles(const float* a, int64_t a_rows, const float* packed, int64_t panels, int dim,
               float* out, int64_t out_stride) {
  chosen_variant().fn(a, a_rows, packed, panels, dim, out, out_stride);
}

const char* dot_tiles_variant() { return chosen_variant().name; }

}  // namespace tsdg
