// The computation of a merge (DESIGN.md "Insert and merge", issue 7): a
// batch of rows with its own k-NN graph merged into an indexed set by the
// incremental GGM (ggm.h), the search lists that can change updated by TSDG
// (diversify.h). The index's glue reads and writes the pages around it.
#pragma once

#include <cstdint>
#include <vector>

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

struct MergeInput {
  MatrixView data;                  // the indexed rows, then the batch
  int64_t split = 0;                // the indexed rows
  const KnnGraph* old_knn = nullptr;      // their k-NN lists, global ids; dists may be empty
  const KnnGraph* batch_knn = nullptr;    // the batch's, ids local to the batch
  const TsdgGraph* old_search = nullptr;  // their search lists, as stored
  // Per indexed row, may be null: nonzero where its k-NN list was repaired
  // after deletes, so that its search list is built again.
  const uint8_t* old_rebuilt = nullptr;
};

struct MergedGraph {
  KnnGraph knn;                         // every row
  TsdgGraph search;                     // every row
  std::vector<uint8_t> knn_change;      // per row, kKnnList* (diversify.h); batch rows: rebuilt
  std::vector<uint8_t> search_changed;  // per row: 1 where the list or its lambdas differ (batch rows: 1)
};

// The merge on the CPU threads: ggm_merge_incremental with params, then
// diversify_tsdg_incremental.
MergedGraph merge_graph_incremental(const MergeInput& in, Metric metric, const GnndParams& params,
                                    const DiversifyParams& diversify, const RunControl& control);

// How each row's k-NN list changed: GGM's per-row changed flags (ggm.h) with
// the repaired lists of in.old_rebuilt.
std::vector<uint8_t> knn_change_codes(const std::vector<uint8_t>& ggm_changed, const MergeInput& in);

// 1 for every row whose search list or lambdas differ from its old one, and
// for every row past the old graph.
std::vector<uint8_t> search_lists_changed(const TsdgGraph& old, const TsdgGraph& merged,
                                          const RunControl& control);

}  // namespace tsdg
