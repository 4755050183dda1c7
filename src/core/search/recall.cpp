#include "recall.h"

#include <algorithm>

#include "types.h"

namespace tsdg {

double recall_at(const uint32_t* found, int found_stride, const uint32_t* truth, int truth_stride,
                 int64_t rows, int at) {
  if (rows <= 0 || at <= 0) return 0.0;
  int64_t hits = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const uint32_t* f = found + i * found_stride;
    const uint32_t* t = truth + i * truth_stride;
    for (int a = 0; a < at; ++a) {
      if (f[a] == kInvalidId) continue;
      // A found list holds each id at most once, so counting matches per truth
      // entry counts the intersection.
      if (std::find(t, t + at, f[a]) != t + at) ++hits;
    }
  }
  return static_cast<double>(hits) / (static_cast<double>(rows) * at);
}

}  // namespace tsdg
