// TSDG: two-stage diversification of a k-NN graph (paper 003, section 3).
#pragma once

#include <cstdint>
#include <vector>

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

// diversify_tsdg after a merge changed some k-NN lists, redone only where a
// list can change. Rows [0, old.nodes) had the search graph old, built from
// knn's lists except where knn_changed is 1 (1 for every row >= old.nodes).
// Stage 1 runs again on the changed k-NN lists only. Stage 2 runs on the
// nodes with a changed k-NN list, on the nodes their pruned lists point to
// (their reverse edges may be new) and on the old nodes whose stored list
// holds a node with a changed list (a reverse edge may be gone); every other
// node keeps its old list. A node's reverse edges are found exactly among the
// changed lists; from the unchanged lists, the reverse edges its old list
// held are kept (those pruned lists did not change), and those the old list
// had dropped (λ > lambda0, or past R) are not looked for again. The
// components are then linked into one, as diversify_tsdg does.
// list_changed gets, per row, 1 where the returned list differs from old.
TsdgGraph diversify_tsdg_incremental(MatrixView data, Metric metric, const KnnGraph& knn,
                                     const std::vector<uint8_t>& knn_changed, const TsdgGraph& old,
                                     const DiversifyParams& params, const RunControl& control,
                                     std::vector<uint8_t>& list_changed);

}  // namespace tsdg
