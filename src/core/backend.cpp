#include "backend.h"

#include <algorithm>

namespace tsdg {

TsdgGraph Backend::build_tsdg_graph(MatrixView data, Metric metric, const GnndParams& gnnd,
                                    const DiversifyParams& diversify_params, uint32_t* knn_ids,
                                    float* knn_dists, const RunControl& control) {
  control.set_phase(Phase::KnnGraph);
  const KnnGraph knn = build_knn_graph(data, metric, gnnd, control);
  if (knn_ids != nullptr) std::copy(knn.ids.begin(), knn.ids.end(), knn_ids);
  if (knn_dists != nullptr) std::copy(knn.dists.begin(), knn.dists.end(), knn_dists);
  control.set_phase(Phase::Diversify);
  return diversify(data, metric, knn, diversify_params, control);
}

}  // namespace tsdg
