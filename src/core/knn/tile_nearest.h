// The search of GNND's selective update (Wang et al., 2021, Algorithm 2) over one
// block of cross-matching dot products: distances formed on the fly from the
// dot products, for every row its nearest column in each of two column
// groups, for every column its nearest row. Compiled for AVX-512, AVX2 and
// the baseline ISA like dot_tiles, the best one chosen once at first use.
#pragma once

#include <cstdint>

namespace tsdg {

struct TileNearestInput {
  const float* dots;  // rows x stride, from dot_tiles (L1: the distances)
  int64_t stride;     // a multiple of kPanelWidth
  int rows;
  int columns;  // columns [0, split) form the first group, [split, columns) the second
  int split;
  // distance(i, j) = row_terms[i] + column_terms[j] - factor * dots(i, j):
  // ||a||^2 + ||b||^2 - 2 a.b for L2, 0 + 0 - a.b for inner product,
  // 1 + 0 - a.b for cosine; for L1, which no dot product gives, dots holds
  // the distances themselves and factor is -1. column_terms holds stride
  // values, +inf past `columns` so that the padding is never chosen.
  const float* row_terms;
  const float* column_terms;
  float factor;
  bool skip_diagonal;  // the rows are also the first columns: (i, i) is no pair
};

// Outputs, -1 / +inf where a group is empty. Ties go to the lowest index.
struct TileNearestOutput {
  int* row_first;  // rows values: nearest column in [0, split)
  float* row_first_dist;
  int* row_second;  // rows values: nearest column in [split, columns)
  float* row_second_dist;
  int* column_nearest;  // stride values: nearest row of every column
  float* column_nearest_dist;
};

void tile_nearest(const TileNearestInput& in, const TileNearestOutput& out);

}  // namespace tsdg
