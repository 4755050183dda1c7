// The computation of a merge (docs/design.md, "Merges"): a
// batch of rows with its own k-NN graph merged into an indexed set by the
// incremental GGM (ggm.h), the search lists that can change updated by TSDG
// (diversify.h). The index's glue reads and writes the pages around it; the
// arrays in and out are the caller's (on the GPU worker, a shared memory
// segment), so that a merge of millions of rows copies none of them again.
#pragma once

#include <cstdint>
#include <future>
#include <vector>

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

class SearchIndex;

struct MergeInput {
  MatrixView data;    // the indexed rows, then the batch
  int64_t split = 0;  // the indexed rows
  int k = 0;          // k-NN list length
  int degree = 0;     // search list length
  const uint32_t* old_knn_ids = nullptr;    // split * k, global ids
  const float* old_knn_dists = nullptr;     // split * k, or null: computed (an index keeps ids only)
  const uint32_t* old_neighbors = nullptr;  // split * degree, the stored search lists
  const uint8_t* old_lambdas = nullptr;     // split * degree
  const KnnGraph* batch_knn = nullptr;      // the batch's graph, ids local to the batch
  // Per indexed row, may be null: nonzero where its k-NN list was repaired
  // after deletes, so that its search list is built again.
  const uint8_t* old_rebuilt = nullptr;
  // May be null: the indexed rows already on the backend's device (a
  // resident index of them), which a GPU merge copies there instead of
  // uploading them again.
  const SearchIndex* old_rows_index = nullptr;
  // May be invalid: the copy of the indexed rows into data that runs beside
  // the merge (the C API's old_rows_source). Until it is ready, the rows are
  // read from old_rows_source, or not at all.
  const float* old_rows_source = nullptr;
  std::shared_future<void> old_rows_copied;
};

// in.data's indexed rows, when they are being copied: waits for the copy.
inline void wait_for_old_rows(const MergeInput& in) {
  if (in.old_rows_copied.valid()) in.old_rows_copied.wait();
}

// The caller's arrays for every row (data.rows of them). Every merge writes
// knn_ids (and knn_dists) before it sets Phase::Diversify (tsdg_capi.h).
struct MergeOutput {
  uint32_t* knn_ids = nullptr;      // rows * k
  float* knn_dists = nullptr;       // rows * k, may be null
  uint32_t* neighbors = nullptr;    // rows * degree
  uint8_t* lambdas = nullptr;       // rows * degree
  uint8_t* knn_change = nullptr;    // rows: kKnnList* (diversify.h); batch rows: rebuilt
  uint8_t* search_changed = nullptr;  // rows: 1 where the list or its lambdas differ (batch rows: 1)
  // rows, may be null: 1 where the component linking changed the list after
  // it was written out in Phase::Link, whose progress counts the search lists
  // in neighbors and lambdas, in row order (the GPU's; the CPU's sets neither)
  uint8_t* relinked = nullptr;
};

// The merge on the CPU threads: ggm_merge_incremental with params, then
// diversify_tsdg_incremental.
void merge_graph_incremental(const MergeInput& in, const MergeOutput& out, Metric metric,
                             const GnndParams& params, const DiversifyParams& diversify,
                             const RunControl& control);

// out.knn_change from GGM's per-row changed flags (ggm.h) and the repaired
// lists of in.old_rebuilt.
void set_knn_change(const uint8_t* ggm_changed, const MergeInput& in, const MergeOutput& out);

// out.search_changed: 1 for every row whose search list or lambdas differ
// from its old one, and for every batch row.
void set_search_changed(const MergeInput& in, const MergeOutput& out, const RunControl& control);

// After a merge: the indexed rows that a stored search list (in.old_neighbors)
// held and the merged list of the same row (out.neighbors, with
// out.search_changed) does not, ascending. Each lost an edge into it, so a
// search that reached it through that edge may not any more. At most
// max_rows of them: those that lost the largest share of the edges into
// them (most lost first on a tie).
std::vector<uint32_t> rows_losing_in_edges(const MergeInput& in, const MergeOutput& out, int64_t max_rows,
                                           const RunControl& control);

}  // namespace tsdg
