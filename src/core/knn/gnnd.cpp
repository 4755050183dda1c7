#include "gnnd.h"

#include <algorithm>
#include <vector>

#include "descent.h"
#include "distance.h"
#include "huge_pages.h"
#include "thread_pool.h"

namespace tsdg {

namespace {

// Fills list s with min(k, n - 1) distinct random rows other than s, marked
// NEW (Algorithm 1, lines 1-5). The generator is seeded per row, so the
// result does not depend on threads.
void init_random_list(MatrixView data, Metric metric, uint64_t seed, int64_t s,
                      DescentLists& lists) {
  const int64_t n = data.rows;
  const int k = lists.k();
  const int m = static_cast<int>(std::min<int64_t>(k, n - 1));
  uint64_t state = seed ^ (static_cast<uint64_t>(s) * 0xd1b54a32d192ed03ULL);
  DescentLists::Entry* entries = lists.list(s);
  uint8_t* flags = lists.flags(s);
  std::vector<uint32_t> drawn(m);
  // Draw from [0, n - 1) and map past s, so s itself is never drawn.
  draw_distinct(state, static_cast<uint64_t>(n - 1), m, drawn.data());
  for (int j = 0; j < m; ++j) drawn[j] = drawn[j] >= s ? drawn[j] + 1 : drawn[j];
  prefetch_rows(data, drawn.data(), m);
  for (int j = 0; j < m; ++j) {
    entries[j].id = drawn[j];
    entries[j].dist = metric_distance(metric, data.row(s), data.row(entries[j].id), data.dim);
    flags[j] = DescentLists::kNew;
  }
  lists.sort_list(s);
}

}  // namespace

KnnGraph gnnd_build(MatrixView data, Metric metric, const GnndParams& params,
                    const RunControl& control) {
  check_gnnd_params(data, params);
  const int64_t n = data.rows;
  control.set_total(n * (params.iterations + 1));

  // The build runs on a copy of the rows stored in region order, so that the
  // rows and lists a join touches are mostly neighbors in memory too; ids are
  // mapped back at the end.
  const std::vector<uint32_t> order = region_order(data, params.seed, control);
  HugePageArray<float> local_values(static_cast<size_t>(n) * data.dim, HugePageArray<float>::Unfilled{});
  const MatrixView local{local_values.data(), n, data.dim};
  parallel_for(control, n, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      std::copy(data.row(order[i]), data.row(order[i]) + data.dim, local_values.data() + i * data.dim);
    }
  });

  DescentLists lists(n, params.k, control);
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) {
      init_random_list(local, metric, params.seed, s, lists);
    }
    control.add_done(end - begin);
  });

  DescentOptions options;
  options.samples = params.samples;
  options.iterations = params.iterations;
  options.min_update_rate = params.min_update_rate;
  options.seed = params.seed;
  options.order_joins_by_region = false;
  const int ran = run_descent(local, metric, lists, options, control);
  control.add_done(n * (params.iterations - ran));  // iterations skipped after convergence

  KnnGraph graph(n, params.k, KnnGraph::Unfilled{});
  parallel_for(control, n, 4096, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      const DescentLists::Entry* entries = lists.list(i);
      uint32_t* ids = graph.ids.data() + static_cast<int64_t>(order[i]) * params.k;
      float* dists = graph.dists.data() + static_cast<int64_t>(order[i]) * params.k;
      for (int j = 0; j < params.k; ++j) {
        ids[j] = entries[j].id == kInvalidId ? kInvalidId : order[entries[j].id];
        dists[j] = entries[j].dist;
      }
    }
  });
  return graph;
}

}  // namespace tsdg
