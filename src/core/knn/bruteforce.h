// Exact k-NN by brute force (Garcia et al., 2010): distances as
// ||x||^2 + ||y||^2 - 2 x.y computed a block at a time by a matrix product
// (L1, which has no such form, pair by pair), then a per-row top-k
// selection. Used for ground truth, for small indexes and for the pending
// rows.
#pragma once

#include <cstdint>

#include "run_control.h"
#include "types.h"

namespace tsdg {

// For each query row, the k nearest rows of base, ascending by the metric's
// comparison distance (squared L2, -ip, 1 - ip on normalized rows, or L1),
// padded with kInvalidId / +inf when base has fewer than k rows. ids and
// dists hold queries.rows * k values.
void exact_knn(MatrixView base, MatrixView queries, Metric metric, int k, uint32_t* ids,
               float* dists, const RunControl& control);

// The exact k-NN graph of data, each row's own entry excluded.
KnnGraph exact_knn_graph(MatrixView data, Metric metric, int k, const RunControl& control);

}  // namespace tsdg
