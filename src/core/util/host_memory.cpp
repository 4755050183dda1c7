#include "host_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <system_error>

namespace tsdg {
namespace {

#ifndef MADV_POPULATE_WRITE
constexpr int kPopulateWrite = 23;  // linux/mman.h, Linux 5.14
#else
constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#endif

constexpr size_t kParallelCopyMin = size_t{64} << 20;
// MADV_POPULATE_WRITE holds the process's mmap lock for reading over the
// whole range; a thread that maps memory meanwhile (cudaMalloc, cudaHostRegister)
// waits for it. Ranges go in parts this large, so that it waits for one
// part, not for a gigabyte. Even in parts a merge's device allocations
// would wait, so a merge maps nothing ahead beside its allocations
// (index_merge.cu, and the C API's background copy).
constexpr size_t kPopulateChunk = size_t{4} << 20;
constexpr int kMaxCopyThreads = 8;

}  // namespace

void populate_for_writing(void* address, size_t bytes) {
  if (address == nullptr || bytes == 0) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = reinterpret_cast<uintptr_t>(address) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(address) + bytes;
  for (uintptr_t part = begin; part < end; part += kPopulateChunk) {
    // Failure (an old kernel, a mapping that refuses it) only loses the head start.
    if (madvise(reinterpret_cast<void*>(part), std::min<uintptr_t>(kPopulateChunk, end - part), kPopulateWrite) != 0) {
      return;
    }
  }
}

void parallel_copy(void* dst, const void* src, size_t bytes, int threads, bool map_ahead) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  threads = std::clamp(threads, 1, kMaxCopyThreads);
  if (bytes < kParallelCopyMin || threads == 1) {
    std::memcpy(dst, src, bytes);
    return;
  }
  const size_t part = (bytes + threads - 1) / threads;
  const auto copy_part = [&](int t) {
    const size_t first = std::min(bytes, part * t);
    const size_t count = std::min(bytes - first, part);
    if (map_ahead) populate_for_writing(static_cast<char*>(dst) + first, count);
    std::memcpy(static_cast<char*>(dst) + first, static_cast<const char*>(src) + first, count);
  };
  std::vector<std::thread> helpers;
  helpers.reserve(threads - 1);
  int started = 1;
  try {
    for (; started < threads; ++started) helpers.emplace_back(copy_part, started);
  } catch (const std::system_error&) {
    // no more threads to be had: this one copies the parts not handed out
  }
  copy_part(0);
  for (int t = started; t < threads; ++t) copy_part(t);
  for (std::thread& helper : helpers) helper.join();
}

BackgroundPopulate::BackgroundPopulate(std::vector<std::pair<void*, size_t>> ranges) {
  try {
    thread_ = std::thread([ranges = std::move(ranges)] {
      for (const auto& [address, bytes] : ranges) populate_for_writing(address, bytes);
    });
  } catch (const std::system_error&) {
    // without a thread the pages are mapped when first written
  }
}

BackgroundPopulate::~BackgroundPopulate() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace tsdg
