#include "merge.h"

#include <algorithm>

#include "diversify.h"
#include "ggm.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// rows lists of width values from src to the caller's dst on the pool's
// threads: tens of MiB whose pages the caller's array maps on first write.
template <typename T>
void copy_rows(const RunControl& control, int64_t rows, int width, const T* src, T* dst) {
  parallel_for(control, rows, 4096, [&](int64_t begin, int64_t end, int) {
    std::copy(src + begin * width, src + end * width, dst + begin * width);
  });
}

}  // namespace

void merge_graph_incremental(const MergeInput& in, const MergeOutput& out, Metric metric,
                             const GnndParams& params, const DiversifyParams& diversify,
                             const RunControl& control) {
  const int64_t n = in.data.rows;
  control.set_phase(Phase::Merge);
  const IncrementalMerge ggm =
      ggm_merge_incremental(in.data, in.split, KnnView(in.old_knn_ids, in.old_knn_dists, in.split, in.k),
                            *in.batch_knn, metric, params, control);
  copy_rows(control, n, ggm.graph.k, ggm.graph.ids.data(), out.knn_ids);
  if (out.knn_dists != nullptr) copy_rows(control, n, ggm.graph.k, ggm.graph.dists.data(), out.knn_dists);
  control.set_phase(Phase::Diversify);
  set_knn_change(ggm.changed.data(), in, out);
  const std::vector<uint8_t> knn_change(out.knn_change, out.knn_change + n);
  std::vector<uint8_t> search_changed;
  const GraphView old_search{in.old_neighbors, in.old_lambdas, in.split, in.degree};
  const TsdgGraph search = diversify_tsdg_incremental(in.data, metric, ggm.graph, knn_change, old_search, diversify,
                                                      control, search_changed);
  copy_rows(control, n, search.degree, search.neighbors.data(), out.neighbors);
  copy_rows(control, n, search.degree, search.lambdas.data(), out.lambdas);
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

std::vector<uint32_t> rows_losing_in_edges(const MergeInput& in, const MergeOutput& out, int64_t max_rows,
                                           const RunControl& control) {
  const int degree = in.degree;
  std::vector<std::vector<uint32_t>> lost(worker_count(control));
  parallel_for(control, in.split, 1024, [&](int64_t begin, int64_t end, int worker) {
    std::vector<uint32_t> merged(degree);
    for (int64_t u = begin; u < end; ++u) {
      if (out.search_changed[u] == 0) continue;
      const size_t at = static_cast<size_t>(u) * degree;
      std::copy(out.neighbors + at, out.neighbors + at + degree, merged.begin());
      std::sort(merged.begin(), merged.end());
      for (int j = 0; j < degree; ++j) {
        const uint32_t v = in.old_neighbors[at + j];
        if (v >= in.split) continue;  // padding
        if (!std::binary_search(merged.begin(), merged.end(), v)) lost[worker].push_back(v);
      }
    }
  });
  std::vector<uint32_t> edges;  // one entry per edge lost, by target
  for (const std::vector<uint32_t>& part : lost) edges.insert(edges.end(), part.begin(), part.end());
  std::sort(edges.begin(), edges.end());
  struct Loss {
    uint32_t row;
    uint32_t lost;
  };
  std::vector<Loss> losses;
  for (size_t i = 0; i < edges.size();) {
    size_t j = i;
    while (j < edges.size() && edges[j] == edges[i]) ++j;
    losses.push_back(Loss{edges[i], static_cast<uint32_t>(j - i)});
    i = j;
  }
  if (static_cast<int64_t>(losses.size()) > max_rows) {
    std::vector<uint32_t> in_degree(in.split, 0);
    for (int64_t i = 0; i < in.split * degree; ++i) {
      if (in.old_neighbors[i] < in.split) ++in_degree[in.old_neighbors[i]];
    }
    // lost / in_degree compared as cross products, exact
    const auto more_at_risk = [&](const Loss& a, const Loss& b) {
      const uint64_t left = uint64_t{a.lost} * in_degree[b.row], right = uint64_t{b.lost} * in_degree[a.row];
      return left != right ? left > right : a.lost != b.lost ? a.lost > b.lost : a.row < b.row;
    };
    std::nth_element(losses.begin(), losses.begin() + max_rows, losses.end(), more_at_risk);
    losses.resize(max_rows);
  }
  std::vector<uint32_t> rows;
  rows.reserve(losses.size());
  for (const Loss& loss : losses) rows.push_back(loss.row);
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace tsdg
