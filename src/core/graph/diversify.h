// TSDG: two-stage diversification of a k-NN graph (Wang, Wang, Zhao, 2022, section 3).
#pragma once

#include <cstdint>
#include <vector>

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// Stage 1 prunes each k-NN list, with the row's long-range candidates
// (long_range.h, params.pivot_candidates and random_candidates) joined to
// it, by the relaxed occlusion rule (Inequation 2, params.alpha), checked
// from the closest neighbor against the edges already kept. The reverse edges of the pruned graph are appended (closest first, the
// list bounded by 2R, no duplicates). Stage 2 gives every edge of a list its
// occlusion factor λ, the number of other edges of the list that occlude it by
// Inequation 1, sorts by (λ, distance), drops edges with λ > params.lambda0
// and stores the first R. Lists are padded with kInvalidId. Finally the
// components of the graph are linked into one (connectivity.h).
TsdgGraph diversify_tsdg(MatrixView data, Metric metric, const KnnGraph& knn,
                         const DiversifyParams& params, const RunControl& control);

// How a row's k-NN list differs from the list its stored search list was
// built from (the knn_changed argument below).
enum KnnListChange : uint8_t {
  kKnnListSame = 0,
  // A new row's list, or an old list replaced (repaired after deletes).
  kKnnListRebuilt = 1,
  // An old list that only took new rows (ids >= the old node count) in,
  // losing its last entries to them: what an incremental GGM does to a list.
  kKnnListGainedNewRows = 2,
};

// diversify_tsdg after a merge added rows, redone only where the new rows
// reach. Rows [0, old.nodes) had the search graph old; knn_changed says per
// row how its k-NN list changed (taken as kKnnListRebuilt for every row >=
// old.nodes).
// - A rebuilt list, with its long-range candidates (pivots of all rows),
//   goes through both stages as in diversify_tsdg; its node's
//   reverse edges are found exactly among the rebuilt lists, and from the
//   other lists the reverse edges its old list held are kept.
// - A list that gained new rows is pruned by stage 1 for its new rows only:
//   each is checked against the closer entries that its node's stored search
//   list holds (taken as kept, as they passed the pruning before) and the
//   closer new rows kept, instead of all k entries against each other.
// - An old node that keeps a new row by that pruning, or that a rebuilt list
//   or a new row's pruned list points to (a new reverse edge), gets its
//   stored list ranked again with those added edges: a stored edge's λ grows
//   by the added edges that occlude it, an added edge's λ counts the
//   occluding edges among the stored and added ones, and the first R by
//   (λ, distance) with λ <= lambda0 are kept. Any other old node keeps its
//   stored list.
// This is how graph indexes insert (FreshDiskANN's RobustPrune(N_out(u) ∪
// new), HNSW's neighbor update): it departs from Wang, Wang, Zhao, 2022, whose stage 2
// sees every node's full pruned list and exact reverse edges. Edges that a
// full rebuild would drop (an old entry now occluded by a new row, a reverse
// edge whose source does not point here any more) stay until λ ranks them
// out. The components are then linked into
// one, as diversify_tsdg does. list_changed gets, per row, 1 where the
// returned list differs from old.
TsdgGraph diversify_tsdg_incremental(MatrixView data, Metric metric, const KnnGraph& knn,
                                     const std::vector<uint8_t>& knn_changed, GraphView old,
                                     const DiversifyParams& params, const RunControl& control,
                                     std::vector<uint8_t>& list_changed);

}  // namespace tsdg
