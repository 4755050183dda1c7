// Large host arrays that a build or merge fills for the first time: shared memory
// segments of several GiB whose pages the kernel maps on first touch, 4 KiB
// at a time, which costs more than the copy into them. So the pages are
// mapped ahead in one call per range, off the thread that waits for the GPU,
// and large copies run on several threads, beside the merge (tsdg_capi.h's
// old_rows_source). Each map-ahead goes in parts, so that a thread that maps
// memory meanwhile (a device allocation) is not held up for long.
#pragma once

#include <cstddef>
#include <thread>
#include <utility>
#include <vector>

namespace tsdg {

// Maps [address, address + bytes) writable now (MADV_POPULATE_WRITE, Linux
// 5.14+). Leaves the contents as they are; on older kernels it does nothing
// and the pages are mapped when first written, as before.
void populate_for_writing(void* address, size_t bytes);

// memcpy on up to `threads` threads (<= 0: hardware concurrency, at most 8),
// each filling its own part of dst, mapped ahead unless map_ahead is false
// (a copy nobody waits for, beside device allocations that the map-ahead
// would hold up); one thread below 64 MiB.
void parallel_copy(void* dst, const void* src, size_t bytes, int threads = 0, bool map_ahead = true);

// Populates ranges on a thread of its own until finished or destroyed
// (destruction waits for it): the ranges must stay mapped until then.
class BackgroundPopulate {
 public:
  explicit BackgroundPopulate(std::vector<std::pair<void*, size_t>> ranges);
  ~BackgroundPopulate();
  BackgroundPopulate(const BackgroundPopulate&) = delete;
  BackgroundPopulate& operator=(const BackgroundPopulate&) = delete;

 private:
  std::thread thread_;
};

}  // namespace tsdg
