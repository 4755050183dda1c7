// tsdg-bench --merge-batches: the incremental-merge benchmark on the
// core alone (no PostgreSQL): a fresh build of all rows against a build of
// the first rows followed by merges of equal batches, through the same C API
// calls the index uses, with CPU and wall time per merge and phase, recall of
// both final graphs and self-lookups of the merged rows.
#pragma once

#include "bench_options.h"

namespace tsdg {
namespace bench {

int run_merge_benchmark(const BenchOptions& options);

}  // namespace bench
}  // namespace tsdg
