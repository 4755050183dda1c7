// TSDG: two-stage diversification of a k-NN graph (paper 003, section 3).
#pragma once

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// Stage 1 prunes each k-NN list with the relaxed occlusion rule (Inequation 2,
// params.alpha), checked from the closest neighbor against the edges already
// kept. The reverse edges of the pruned graph are appended (closest first, the
// list bounded by 2R, no duplicates). Stage 2 gives every edge of a list its
// occlusion factor λ, the number of other edges of the list that occlude it by
// Inequation 1, sorts by (λ, distance), drops edges with λ > params.lambda0
// and stores the first R. Lists are padded with kInvalidId. Finally the
// components of the graph are linked into one (connectivity.h).
TsdgGraph diversify_tsdg(MatrixView data, Metric metric, const KnnGraph& knn,
                         const DiversifyParams& params, const RunControl& control);

}  // namespace tsdg
