#include "merge.h"

#include <algorithm>
#include <limits>

#include "diversify.h"
#include "ggm.h"
#include "thread_pool.h"

namespace tsdg {

void merge_graph_incremental(const MergeInput& in, const MergeOutput& out, Metric metric,
                             const GnndParams& params, const DiversifyParams& diversify,
                             const RunControl& control) {
  const int64_t n = in.data.rows;
  control.set_phase(Phase::Merge);
  const IncrementalMerge ggm = ggm_merge_incremental(in.data, in.split, copy_old_knn(in), *in.batch_knn,
                                                     metric, params, control);
  std::copy(ggm.graph.ids.begin(), ggm.graph.ids.end(), out.knn_ids);
  if (out.knn_dists != nullptr) std::copy(ggm.graph.dists.begin(), ggm.graph.dists.end(), out.knn_dists);
  control.set_phase(Phase::Diversify);
  set_knn_change(ggm.changed.data(), in, out);
  const std::vector<uint8_t> knn_change(out.knn_change, out.knn_change + n);
  std::vector<uint8_t> search_changed;
  const TsdgGraph search = diversify_tsdg_incremental(in.data, metric, ggm.graph, knn_change, copy_old_search(in),
                                                      diversify, control, search_changed);
  std::copy(search.neighbors.begin(), search.neighbors.end(), out.neighbors);
  std::copy(search.lambdas.begin(), search.lambdas.end(), out.lambdas);
  std::copy(search_changed.begin(), search_changed.end(), out.search_changed);
}

void set_knn_change(const uint8_t* ggm_changed, const MergeInput& in, const MergeOutput& out) {
  for (int64_t u = 0; u < in.data.rows; ++u) {
    // An old list the GGM changed only took batch rows in; a repaired one is
    // rebuilt.
    out.knn_change[u] = u >= in.split || (in.old_rebuilt != nullptr && in.old_rebuilt[u] != 0)
                            ? kKnnListRebuilt
                        : ggm_changed[u] ? kKnnListGainedNewRows
                                         : kKnnListSame;
  }
}

void set_search_changed(const MergeInput& in, const MergeOutput& out, const RunControl& control) {
  const int degree = in.degree;
  std::fill(out.search_changed + in.split, out.search_changed + in.data.rows, 1);
  parallel_for(control, in.split, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t w = begin; w < end; ++w) {
      const size_t at = static_cast<size_t>(w) * degree;
      out.search_changed[w] = !std::equal(in.old_neighbors + at, in.old_neighbors + at + degree, out.neighbors + at) ||
                              !std::equal(in.old_lambdas + at, in.old_lambdas + at + degree, out.lambdas + at);
    }
  });
}

KnnGraph copy_old_knn(const MergeInput& in) {
  KnnGraph graph;
  graph.nodes = in.split;
  graph.k = in.k;
  const size_t entries = static_cast<size_t>(in.split) * in.k;
  graph.ids.assign(in.old_knn_ids, in.old_knn_ids + entries);
  if (in.old_knn_dists != nullptr) {
    graph.dists.assign(in.old_knn_dists, in.old_knn_dists + entries);
    for (size_t i = 0; i < entries; ++i) {
      if (graph.ids[i] == kInvalidId) graph.dists[i] = std::numeric_limits<float>::infinity();
    }
  }
  return graph;
}

TsdgGraph copy_old_search(const MergeInput& in) {
  TsdgGraph graph;
  graph.nodes = in.split;
  graph.degree = in.degree;
  const size_t entries = static_cast<size_t>(in.split) * in.degree;
  graph.neighbors.assign(in.old_neighbors, in.old_neighbors + entries);
  graph.lambdas.assign(in.old_lambdas, in.old_lambdas + entries);
  return graph;
}

}  // namespace tsdg
