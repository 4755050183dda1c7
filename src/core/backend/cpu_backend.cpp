// The CPU Backend: every step on the thread pool of the RunControl.
#include "backend.h"
#include "bruteforce.h"
#include "diversify.h"
#include "ggm.h"
#include "gnnd.h"
#include "search.h"

namespace tsdg {

namespace {

class CpuBackend : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  // Its kernels compute every metric pair by pair where no matrix product does.
  bool computes(Metric) const override { return true; }

  void exact_knn(MatrixView base, MatrixView queries, Metric metric, int k, uint32_t* ids,
                 float* dists, const RunControl& control) override {
    tsdg::exact_knn(base, queries, metric, k, ids, dists, control);
  }

  KnnGraph build_knn_graph(MatrixView data, Metric metric, const GnndParams& params,
                           const RunControl& control) override {
    return gnnd_build(data, metric, params, control);
  }

  KnnGraph merge_knn_graphs(MatrixView data, int64_t split, const KnnGraph& first,
                            const KnnGraph& second, Metric metric, const GnndParams& params,
                            const RunControl& control) override {
    return ggm_merge(data, split, first, second, metric, params, control);
  }

  TsdgGraph diversify(MatrixView data, Metric metric, const KnnGraph& knn,
                      const DiversifyParams& params, const RunControl& control) override {
    return diversify_tsdg(data, metric, knn, params, control);
  }

  using Backend::make_search_index;
  std::unique_ptr<SearchIndex> make_search_index(MatrixView data, GraphView graph, Metric metric,
                                                 const SearchIndex* /* same_rows */) override {
    return std::make_unique<CpuSearchIndex>(data, graph, metric);
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace tsdg
