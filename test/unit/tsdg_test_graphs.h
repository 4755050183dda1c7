// Small data sets and TSDG graphs shared by the diversification, search and
// C API tests: clustered rows, their exact k-NN graph, and its TSDG graph.
#pragma once

#include <cstdint>

#include "bruteforce.h"
#include "diversify.h"
#include "run_control.h"
#include "synthetic.h"
#include "types.h"

namespace tsdg {
namespace testing {

inline SyntheticSpec small_clustered_spec(int64_t rows, int dim, int clusters, uint64_t seed) {
  SyntheticSpec spec;
  spec.rows = rows;
  spec.dim = dim;
  spec.clusters = clusters;
  spec.intrinsic_dim = dim < 8 ? dim : 8;
  spec.seed = seed;
  return spec;
}

inline TsdgGraph tsdg_graph_of(const Matrix& data, int k, const DiversifyParams& params) {
  const RunControl control;
  const KnnGraph knn = exact_knn_graph(data.view(), Metric::L2, k, control);
  return diversify_tsdg(data.view(), Metric::L2, knn, params, control);
}

}  // namespace testing
}  // namespace tsdg
