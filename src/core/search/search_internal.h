// What the graph search and the unreached-row checks (search.cpp and
// unreached.cpp) share: the per-worker visited marks and the row prefetch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tsdg::detail {

// Visited marks for one worker: a tag per node, bumped per query, so starting
// a query costs nothing until the tags wrap around.
class VisitedTable {
 public:
  explicit VisitedTable(int64_t nodes) : tags_(static_cast<size_t>(nodes), 0) {}
  void next_query() {
    if (++current_ == 0) {
      std::fill(tags_.begin(), tags_.end(), 0);
      current_ = 1;
    }
  }
  bool mark(uint32_t id) {
    if (tags_[id] == current_) return false;
    tags_[id] = current_;
    return true;
  }
  size_t bytes() const { return tags_.size() * sizeof(uint16_t); }

 private:
  std::vector<uint16_t> tags_;
  uint16_t current_ = 0;
};

inline void prefetch_row(const float* row, int dim) {
  const char* bytes = reinterpret_cast<const char*>(row);
  const int lines = static_cast<int>((static_cast<size_t>(dim) * sizeof(float) + 63) / 64);
  for (int line = 0; line < lines; ++line) __builtin_prefetch(bytes + 64 * line, 0, 3);
}

}  // namespace tsdg::detail
