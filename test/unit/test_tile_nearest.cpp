#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <vector>

#include "dot_tiles.h"
#include "tile_nearest.h"

namespace tsdg {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Nearest {
  int arg = -1;
  float dist = kInf;
  void offer(int j, float d) {
    if (d < dist) {  // strict: the first index at the minimum stays
      dist = d;
      arg = j;
    }
  }
};

// Random dot products with a few exact ties, checked against plain loops.
void check_against_naive(int rows, int columns, int split, bool skip_diagonal, float factor,
                         uint32_t seed) {
  const int64_t stride = round_up(columns, kPanelWidth);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> small(0, 7);  // few values: ties happen
  std::vector<float> dots(rows * stride), row_terms(rows), column_terms(stride, kInf);
  for (float& v : dots) v = static_cast<float>(small(rng));
  for (float& v : row_terms) v = static_cast<float>(small(rng));
  for (int j = 0; j < columns; ++j) column_terms[j] = static_cast<float>(small(rng));

  std::vector<int> first(rows), second(rows), column(stride);
  std::vector<float> first_dist(rows), second_dist(rows), column_dist(stride);
  tile_nearest({dots.data(), stride, rows, columns, split, row_terms.data(), column_terms.data(), factor,
                skip_diagonal},
               {first.data(), first_dist.data(), second.data(), second_dist.data(), column.data(),
                column_dist.data()});

  std::vector<Nearest> want_first(rows), want_second(rows), want_column(columns);
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < columns; ++j) {
      if (skip_diagonal && i == j) continue;
      const float d = row_terms[i] + column_terms[j] - factor * dots[i * stride + j];
      (j < split ? want_first : want_second)[i].offer(j, d);
      want_column[j].offer(i, d);
    }
  }
  for (int i = 0; i < rows; ++i) {
    EXPECT_EQ(first[i], want_first[i].arg) << "row " << i;
    EXPECT_EQ(second[i], want_second[i].arg) << "row " << i;
    if (first[i] >= 0) {
      EXPECT_EQ(first_dist[i], want_first[i].dist);
    }
    if (second[i] >= 0) {
      EXPECT_EQ(second_dist[i], want_second[i].dist);
    }
  }
  for (int j = 0; j < columns; ++j) {
    EXPECT_EQ(column[j], want_column[j].arg) << "column " << j;
    if (column[j] >= 0) {
      EXPECT_EQ(column_dist[j], want_column[j].dist);
    }
  }
}

TEST(TileNearest, MatchesNaiveLoopsOnTwoGroups) {
  check_against_naive(30, 61, 25, false, 2.0f, 1);
  check_against_naive(7, 16, 9, false, 1.0f, 2);
}

TEST(TileNearest, SymmetricBlockSkipsTheDiagonal) {
  // The rows are the first columns, as in GNND's NEW-NEW block.
  check_against_naive(32, 64, 32, true, 2.0f, 3);
  check_against_naive(1, 17, 1, true, 2.0f, 4);
}

TEST(TileNearest, EmptyGroupsGiveNoNeighbor) {
  check_against_naive(5, 20, 0, false, 2.0f, 5);   // no first group
  check_against_naive(5, 20, 20, false, 2.0f, 6);  // no second group
  check_against_naive(1, 1, 1, true, 2.0f, 7);     // a lone row has no pair
}

}  // namespace
}  // namespace tsdg
