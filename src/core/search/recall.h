// Recall of approximate neighbor lists against exact ones.
#pragma once

#include <cstdint>

namespace tsdg {

// Mean over rows of |found[:at] ∩ truth[:at]| / at. Row i of found starts at
// found + i * found_stride (likewise truth); kInvalidId never matches.
double recall_at(const uint32_t* found, int found_stride, const uint32_t* truth, int truth_stride,
                 int64_t rows, int at);

}  // namespace tsdg
