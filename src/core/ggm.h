// GGM (paper 000, section 5, Algorithm 3): merges the k-NN graphs of two
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
// final among themselves; rows [split, data.rows) are a batch with graph
// `batch_graph` (ids local to the batch). Only pairs across the two sets are
// joined (as in ggm_merge), but the old lists are not seeded with random batch
// rows: they keep their whole list and take part only once a join offers them
// a batch row, so the work follows the batch and the old lists near it. The
// batch lists start as Algorithm 3 starts them (k - k/2 of their own
// neighbors, k/2 random old rows). The iterations stop when their updates fall
// below params.min_update_rate * k * (the lists that can change: the batch
// rows, plus at most k old lists per batch row), or after params.iterations.
struct IncrementalMerge {
  KnnGraph graph;                // all rows, global ids
  std::vector<uint8_t> changed;  // per row: 1 when its list is not its old list (batch rows: 1)
  int iterations = 0;            // GNND iterations run
};

// The update rate at which a merge stops (GNND's 0.001 is for a build): the
// last iterations of a merge add little. 10k clustered rows of 128 dimensions
// into 100k, k 64: 12 iterations at 0.001 (k-NN recall@10 0.9992), 9 at
// 0.005 (0.9990), 5 iterations give 0.9968; into 190k: 10 iterations at
// 0.001 (0.9996), 7 at 0.005 (0.9992).
constexpr double kMergeMinUpdateRate = 0.005;

// A merge's GGM samples half the build's p, for at most this many
// iterations. Most of a merge's joins are old lists that took a batch row
// matched against their old neighbors; p 16 to 8 halves them. 10k rows into
// 190k (k 64, tsdg-bench --merge-batches): p 16 and the update-rate stop ran
// 7 iterations in 4.6 CPU s, p 8 ran 9 in 3.3 s, p 8 capped at 6 in 2.0 s,
// all at the fresh build's search recall; 3 iterations at p 16 lost 0.0066
// of recall@10 at ef 10. docs/benchmarks.md (Faster incremental merge).
constexpr int kMergeMaxIterations = 6;

// The GGM parameters of a merge from the index's build parameters.
GnndParams incremental_merge_params(const GnndParams& build);

IncrementalMerge ggm_merge_incremental(MatrixView data, int64_t split, const KnnGraph& old_graph,
                                       const KnnGraph& batch_graph, Metric metric,
                                       const GnndParams& params, const RunControl& control);

}  // namespace tsdg
