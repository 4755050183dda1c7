#include "tile_nearest.h"

#include <cstring>
#include <limits>

#include "dot_tiles.h"

namespace tsdg {

namespace {

typedef float Lanes __attribute__((vector_size(kPanelWidth * sizeof(float))));
typedef int32_t LaneInts __attribute__((vector_size(kPanelWidth * sizeof(int32_t))));

constexpr float kInf = std::numeric_limits<float>::infinity();

// Vectors are passed by reference: as values their ABI would depend on the
// ISA of the caller.
template <typename Vector, typename T>
__attribute__((always_inline)) inline void load(Vector& v, const T* p) {
  std::memcpy(&v, p, sizeof(v));
}

// Halves a (distance, index) vector: lane l of the result is the minimum of
// lanes l and l + width of the input, the lower index on ties. Vectors of
// lanes stay whole vectors (a shuffle across all 16 lanes compiles to
// scalar code without AVX-512 byte permutes).
template <typename Dists, typename Args, typename HalfDists, typename HalfArgs>
__attribute__((always_inline)) inline void halve(const Dists& dist, const Args& arg, HalfDists& half_dist,
                                                 HalfArgs& half_arg) {
  HalfDists low_dist, high_dist;
  HalfArgs low_arg, high_arg;
  std::memcpy(&low_dist, &dist, sizeof(low_dist));
  std::memcpy(&high_dist, reinterpret_cast<const char*>(&dist) + sizeof(low_dist), sizeof(high_dist));
  std::memcpy(&low_arg, &arg, sizeof(low_arg));
  std::memcpy(&high_arg, reinterpret_cast<const char*>(&arg) + sizeof(low_arg), sizeof(high_arg));
  const HalfArgs take = (high_dist < low_dist) | ((high_dist == low_dist) & (high_arg < low_arg));
  half_dist = take ? high_dist : low_dist;
  half_arg = take ? high_arg : low_arg;
}

typedef float Lanes8 __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t LaneInts8 __attribute__((vector_size(8 * sizeof(int32_t))));
typedef float Lanes4 __attribute__((vector_size(4 * sizeof(float))));
typedef int32_t LaneInts4 __attribute__((vector_size(4 * sizeof(int32_t))));
typedef float Lanes2 __attribute__((vector_size(2 * sizeof(float))));
typedef int32_t LaneInts2 __attribute__((vector_size(2 * sizeof(int32_t))));

// The (distance, index) minimum over the lanes. A lane still at +inf holds
// index -1, so an empty group gives -1.
__attribute__((always_inline)) inline void reduce_lanes(const Lanes& dist, const LaneInts& arg, int* out_arg,
                                                        float* out_dist) {
  Lanes8 dist8;
  LaneInts8 arg8;
  halve(dist, arg, dist8, arg8);
  Lanes4 dist4;
  LaneInts4 arg4;
  halve(dist8, arg8, dist4, arg4);
  Lanes2 dist2;
  LaneInts2 arg2;
  halve(dist4, arg4, dist2, arg2);
  // Without branches: which of the last two wins is data, not a pattern.
  const bool second = (dist2[1] < dist2[0]) | ((dist2[1] == dist2[0]) & (arg2[1] < arg2[0]));
  *out_arg = arg2[second];
  *out_dist = dist2[second];
}

__attribute__((always_inline)) inline void tile_nearest_body(const TileNearestInput& in,
                                                             const TileNearestOutput& out) {
  const int chunks = static_cast<int>(in.stride / kPanelWidth);
  const Lanes inf = Lanes{} + kInf;
  LaneInts lane_index;
  for (int l = 0; l < kPanelWidth; ++l) lane_index[l] = l;
  for (int c = 0; c < chunks; ++c) {
    std::memcpy(out.column_nearest_dist + c * kPanelWidth, &inf, sizeof(inf));
    const LaneInts none = LaneInts{} - 1;
    std::memcpy(out.column_nearest + c * kPanelWidth, &none, sizeof(none));
  }
  for (int i = 0; i < in.rows; ++i) {
    const float* dots = in.dots + i * in.stride;
    const Lanes row_term = Lanes{} + in.row_terms[i];
    const int diagonal = in.skip_diagonal ? i : -1;
    Lanes first = inf, second = inf;
    LaneInts first_arg = LaneInts{} - 1, second_arg = LaneInts{} - 1;
    for (int c = 0; c < chunks; ++c) {
      const LaneInts index = lane_index + c * kPanelWidth;
      Lanes column_term, dot;
      load(column_term, in.column_terms + c * kPanelWidth);
      load(dot, dots + c * kPanelWidth);
      Lanes d = row_term + column_term - in.factor * dot;
      d = index == diagonal ? inf : d;
      const LaneInts in_first = index < in.split;
      const Lanes d_first = in_first ? d : inf;
      const Lanes d_second = in_first ? inf : d;
      const LaneInts closer_first = d_first < first;
      first = closer_first ? d_first : first;
      first_arg = closer_first ? index : first_arg;
      const LaneInts closer_second = d_second < second;
      second = closer_second ? d_second : second;
      second_arg = closer_second ? index : second_arg;

      float* column_dist = out.column_nearest_dist + c * kPanelWidth;
      int* column_arg = out.column_nearest + c * kPanelWidth;
      Lanes best;
      LaneInts arg;
      load(best, column_dist);
      load(arg, column_arg);
      const LaneInts closer = d < best;
      const Lanes new_best = closer ? d : best;
      const LaneInts new_arg = closer ? (LaneInts{} + i) : arg;
      std::memcpy(column_dist, &new_best, sizeof(new_best));
      std::memcpy(column_arg, &new_arg, sizeof(new_arg));
    }
    reduce_lanes(first, first_arg, out.row_first + i, out.row_first_dist + i);
    reduce_lanes(second, second_arg, out.row_second + i, out.row_second_dist + i);
  }
}

__attribute__((target("avx512f"))) void tile_nearest_avx512(const TileNearestInput& in,
                                                            const TileNearestOutput& out) {
  tile_nearest_body(in, out);
}

__attribute__((target("avx2,fma"))) void tile_nearest_avx2(const TileNearestInput& in,
                                                           const TileNearestOutput& out) {
  tile_nearest_body(in, out);
}

void tile_nearest_generic(const TileNearestInput& in, const TileNearestOutput& out) {
  tile_nearest_body(in, out);
}

using TileNearestFn = void (*)(const TileNearestInput&, const TileNearestOutput&);

TileNearestFn chosen_variant() {
  static const TileNearestFn fn = [] {
    if (__builtin_cpu_supports("avx512f")) return &tile_nearest_avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &tile_nearest_avx2;
    return &tile_nearest_generic;
  }();
  return fn;
}

}  // namespace

void tile_nearest(const TileNearestInput& in, const TileNearestOutput& out) { chosen_variant()(in, out); }

}  // namespace tsdg
