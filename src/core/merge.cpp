#include "merge.h"

#include <algorithm>
#include <utility>

#include "diversify.h"
#include "ggm.h"
#include "thread_pool.h"

namespace tsdg {

MergedGraph merge_graph_incremental(const MergeInput& in, Metric metric, const GnndParams& params,
                                    const DiversifyParams& diversify, const RunControl& control) {
  control.set_phase(Phase::Merge);
  IncrementalMerge ggm =
      ggm_merge_incremental(in.data, in.split, *in.old_knn, *in.batch_knn, metric, params, control);
  control.set_phase(Phase::Diversify);
  MergedGraph merged;
  merged.knn_change = knn_change_codes(ggm.changed, in);
  merged.search = diversify_tsdg_incremental(in.data, metric, ggm.graph, merged.knn_change, *in.old_search,
                                             diversify, control, merged.search_changed);
  merged.knn = std::move(ggm.graph);
  return merged;
}

std::vector<uint8_t> knn_change_codes(const std::vector<uint8_t>& ggm_changed, const MergeInput& in) {
  const int64_t n = static_cast<int64_t>(ggm_changed.size());
  std::vector<uint8_t> codes(n);
  for (int64_t u = 0; u < n; ++u) {
    // An old list the GGM changed only took batch rows in; a repaired one is
    // rebuilt.
    codes[u] = u >= in.split || (in.old_rebuilt != nullptr && in.old_rebuilt[u] != 0) ? kKnnListRebuilt
               : ggm_changed[u]                                                   ? kKnnListGainedNewRows
                                                                                  : kKnnListSame;
  }
  return codes;
}

std::vector<uint8_t> search_lists_changed(const TsdgGraph& old, const TsdgGraph& merged,
                                          const RunControl& control) {
  std::vector<uint8_t> changed(merged.nodes, 1);
  const int degree = merged.degree;
  parallel_for(control, std::min(old.nodes, merged.nodes), 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t w = begin; w < end; ++w) {
      changed[w] = !std::equal(old.list(w), old.list(w) + degree, merged.list(w)) ||
                   !std::equal(old.list_lambdas(w), old.list_lambdas(w) + degree, merged.list_lambdas(w));
    }
  });
  return changed;
}

}  // namespace tsdg
