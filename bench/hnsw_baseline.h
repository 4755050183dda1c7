// hnswlib (M, ef_construction as given) on the same rows and threads, the
// baseline tsdg-bench compares against. Compiled when CMake finds hnswlib.
#pragma once

#ifdef TSDG_HAVE_HNSWLIB

#include <cstdint>
#include <memory>

#include "run_control.h"
#include "types.h"

namespace tsdg {
namespace bench {

class HnswBaseline {
 public:
  // Builds the index, inserting rows in parallel on control's pool.
  HnswBaseline(MatrixView data, Metric metric, int m, int ef_construction,
               const RunControl& control);
  ~HnswBaseline();

  // k ids per query, nearest first; returns hnswlib's count of distance
  // computations (neighbors scanned) for the batch.
  int64_t search(MatrixView queries, int k, int ef, uint32_t* ids, const RunControl& control);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bench
}  // namespace tsdg

#endif  // TSDG_HAVE_HNSWLIB
