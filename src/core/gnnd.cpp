#include "gnnd.h"

#include <algorithm>
#include <vector>

#include "descent.h"
#include "distance.h"
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
  for (int j = 0; j < m; ++j) {
    entries[j].id = drawn[j] >= s ? drawn[j] + 1 : drawn[j];
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
  DescentLists lists(n, params.k);
  parallel_for(control, n, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t s = begin; s < end; ++s) init_random_list(data, metric, params.seed, s, lists);
    control.add_done(end - begin);
  });

  DescentOptions options;
  options.samples = params.samples;
  options.iterations = params.iterations;
  options.min_update_rate = params.min_update_rate;
  options.seed = params.seed;
  const int ran = run_descent(data, metric, lists, options, control);
  control.add_done(n * (params.iterations - ran));  // iterations skipped after convergence
  return lists.to_graph();
}

}  // namespace tsdg
