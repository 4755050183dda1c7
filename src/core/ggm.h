// GGM (paper 000, section 5, Algorithm 3): merges the k-NN graphs of two
// disjoint row sets into the k-NN graph of their union.
#pragma once

#include <cstdint>

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// Rows [0, split) of data have graph first; rows [split, data.rows) have graph
// second, whose ids are local to that side (0 .. data.rows - split - 1). Both
// graphs must have params.k neighbors per list. Returns the graph of all rows
// with global ids.
KnnGraph ggm_merge(MatrixView data, int64_t split, const KnnGraph& first, const KnnGraph& second,
                   Metric metric, const GnndParams& params, const RunControl& control);

}  // namespace tsdg
