// Long-range candidates for the diversification: each row's nearest pivots,
// rows spread evenly over the ids. Once GNND has converged on clustered data
// a row's k-NN list holds only its own cluster, and a graph pruned from those
// lists alone has no route between clusters. A row's nearest pivots reach
// into the clusters around it; the relaxed pruning (alpha > 1) keeps the
// nearest pivot of each such cluster, since the row's near neighbors do not
// occlude it, so neighboring clusters are linked whatever the accuracy of the
// k-NN graph (the long edges of Subramanya et al., 2019 (Vamana), taken from
// a sample of pivots instead of search routes).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg {

// An exact k-NN search of base for each query row, as Backend::exact_knn
// answers it (ascending, padded with kInvalidId / +inf).
using ExactSearch = std::function<void(MatrixView base, MatrixView queries, int k, uint32_t* ids, float* dists)>;

// The pivots of a set of rows: every stride-th id, from 0.
std::vector<uint32_t> pivot_rows(int64_t rows, int64_t stride);

// Whether the lists get long-range candidates at all.
inline bool has_long_range_candidates(const DiversifyParams& params) {
  return params.pivot_candidates > 0 || params.random_candidates > 0;
}

// The stride of the pivots of rows rows: pivot_stride or, where that would
// give more than max_pivots pivots, rows / max_pivots rounded up; 0 where
// there are none (no pivot candidates asked, or the stride reaches the rows).
int64_t long_range_pivot_stride(int64_t rows, const DiversifyParams& params);
// The nearest pivots searched for each row among pivot_count.
int pivots_asked(const DiversifyParams& params, int64_t pivot_count);
// The random candidates each row gets (none in a set of one row).
int random_candidate_count(const DiversifyParams& params, int64_t rows);
// The width of the widened lists: the k-NN lists' knn_k entries, as many as
// max_width (> 0) leaves beside long_range candidates, and those.
int long_range_list_width(int knn_k, int long_range, int max_width);

// knn with each listed row's params.pivot_candidates nearest pivots merged
// into its list; the pivots are pivot_rows(data.rows, stride) for the stride
// of long_range_pivot_stride. The lists are ascending by (distance, id), the
// row itself and duplicates left out, padded with kInvalidId / +inf. Each listed row also
// gets params.random_candidates rows drawn uniformly (random_candidate.h).
// rows: the rows that get long-range candidates (null: every row);
// the other lists are only widened. max_width > 0 bounds the lists' length:
// the k-NN lists give up their farthest entries to make room.
KnnGraph with_long_range_candidates(MatrixView data, Metric metric, const KnnGraph& knn,
                                    const DiversifyParams& params, const ExactSearch& search,
                                    const RunControl& control, const std::vector<uint32_t>* rows = nullptr,
                                    int max_width = 0);

}  // namespace tsdg
