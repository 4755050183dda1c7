// GGM (Wang et al., 2021, section 5, Algorithm 3): merges the k-NN graphs of two
// disjoint row sets into the k-NN graph of their union.
#pragma once

#include <cstdint>
#include <vector>

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

// Incremental GGM: Algorithm 3 restricted to the lists a batch can change.
// Rows [0, split) are an indexed set whose graph `old_graph` (global ids) is
// final among themselves (its dists may be null, as an index keeps only the
// ids: they are then computed here); rows [split, data.rows) are a batch with graph
// `batch_graph` (ids local to the batch). Only pairs across the two sets are
// joined (as in ggm_merge), but the old lists are not seeded with random batch
// rows: they keep their whole list and take part only once a join offers them
// a batch row, so the work follows the batch and the old lists near it. The
// batch lists start with k - k/2 of their own neighbors, as in Algorithm 3,
// but their k/2 old rows are not random: they are the nearest old rows a
// greedy walk on the old graph meets on its way from the batch row's nearest
// pivot (a sample of one old row in 256) towards the row. Lists that start
// near their final ones need fewer joins at the same recall. The iterations stop when their updates fall
// below params.min_update_rate * k * (the lists that can change: the batch
// rows, plus at most k old lists per batch row), or after params.iterations.
struct IncrementalMerge {
  KnnGraph graph;                // all rows, global ids
  std::vector<uint8_t> changed;  // per row: 1 when its list is not its old list (batch rows: 1)
  int iterations = 0;            // GNND iterations run
};

// The batch lists' start (ggm_merge_incremental): a batch row walks
// greedily on the old k-NN graph from its nearest pivot for at most
// kMergeSeedWalkSteps steps. The walk cannot leave a cluster that the k-NN
// graph does not link to others, so a cluster without a pivot leaves its
// batch rows without their old neighbors, which no join then brings: one old
// row in kMergeSeedPivotRows is a pivot, so that clusters of a few hundred
// rows have several, up to kMergeSeedMaxPivots pivots (the nearest-pivot
// search costs batch rows times pivots distances), and never fewer than one
// in kMergeSeedSparsestPivotRows.
constexpr int64_t kMergeSeedPivotRows = 32;
constexpr int64_t kMergeSeedMaxPivots = 16384;
constexpr int64_t kMergeSeedSparsestPivotRows = 256;
constexpr int kMergeSeedWalkSteps = 8;

// The pivots of a merge into split indexed rows: distinct rows of [0, split),
// the same for a seed on every backend.
std::vector<uint32_t> merge_seed_pivots(int64_t split, uint64_t seed);

// The update rate at which a merge stops (GNND's 0.001 is for a build): the
// last iterations of a merge add little. 10k clustered rows of 128 dimensions
// into 100k, k 64: 12 iterations at 0.001 (k-NN recall@10 0.9992), 9 at
// 0.005 (0.9990), 5 iterations give 0.9968; into 190k: 10 iterations at
// 0.001 (0.9996), 7 at 0.005 (0.9992).
constexpr double kMergeMinUpdateRate = 0.005;

// The forward OLD samples of an old row in the incremental merge, among its
// old neighbors (the batch rows keep p). An old row's NEW
// samples are batch rows, and its OLD samples only meet those: its nearest
// 8 old neighbors, and the rows that sample it back, carry the batch rows on
// to the old lists around it, which its farther neighbors reach through
// theirs: fewer distances than p old samples, at the same recall after
// many merges.
constexpr int kMergeOldRowOldSamples = 8;

// The GGM parameters of a merge from the index's build parameters: the
// build's p and iterations with the update-rate stop above. Fewer samples
// are faster on easy data but leave the merged graph of overlapping,
// high-dimensional clusters under a fresh build's recall, and more
// iterations do not win it back.
GnndParams incremental_merge_params(const GnndParams& build);

// The update rate of GNND's stop rule for an incremental merge of `batch`
// rows into `split`: `rate` taken relative to the lists that can change rather
// than to all rows (a batch row enters about k old lists on average, a k-NN
// graph having n k reverse edges).
double incremental_merge_update_rate(double rate, int64_t split, int64_t batch, int k);

// changed[s] = 1 for the batch rows and for the old rows whose list holds a
// batch row: only pairs across the sets are joined, so an old list changed
// exactly when it took a batch row in.
std::vector<uint8_t> lists_changed_by_batch(const uint32_t* merged_ids, int64_t nodes, int k,
                                            int64_t split, const RunControl& control);

IncrementalMerge ggm_merge_incremental(MatrixView data, int64_t split, KnnView old_graph,
                                       const KnnGraph& batch_graph, Metric metric,
                                       const GnndParams& params, const RunControl& control);

}  // namespace tsdg
