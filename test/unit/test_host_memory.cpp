// The host-memory helpers of builds and merges: a parallel copy equals
// memcpy at every split (sizes that do not divide among the threads,
// unaligned ends), and populating pages, ahead, on a thread or through the C
// API, leaves what they hold, also when the range goes meanwhile.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "host_memory.h"
#include "tsdg_capi.h"

namespace tsdg {
namespace {

std::vector<uint8_t> pattern(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> values(bytes);
  uint32_t x = seed;
  for (uint8_t& v : values) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<uint8_t>(x >> 24);
  }
  return values;
}

TEST(HostMemory, ParallelCopyEqualsMemcpy) {
  const size_t sizes[] = {0, 1, 4095, (size_t{64} << 20) - 1, (size_t{64} << 20) + 4097};
  for (const size_t bytes : sizes) {
    for (const int threads : {1, 3, 8}) {
      const std::vector<uint8_t> src = pattern(bytes + 3, static_cast<uint32_t>(bytes + threads));
      std::vector<uint8_t> dst(bytes + 5, 0xAB);
      parallel_copy(dst.data() + 1, src.data() + 3, bytes, threads);
      EXPECT_EQ(dst[0], 0xAB);
      EXPECT_EQ(dst[bytes + 1], 0xAB) << bytes << " bytes on " << threads << " threads wrote past the end";
      EXPECT_EQ(std::memcmp(dst.data() + 1, src.data() + 3, bytes), 0) << bytes << " bytes, " << threads << " threads";
    }
  }
}

TEST(HostMemory, PopulateKeepsContents) {
  const size_t bytes = size_t{3} << 20;
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* bytes_at = static_cast<uint8_t*>(shared);
  bytes_at[12345] = 7;
  populate_for_writing(bytes_at + 100, bytes - 200);
  { const BackgroundPopulate ahead({{bytes_at, bytes}, {nullptr, 0}}); }
  EXPECT_EQ(bytes_at[12345], 7);
  EXPECT_EQ(bytes_at[bytes - 1], 0);
  munmap(shared, bytes);
}

TEST(HostMemory, PagesMappedAheadKeepTheirContents) {
  const size_t bytes = size_t{64} << 20;
  void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* bytes_at = static_cast<uint8_t*>(shared);
  bytes_at[0] = 3;
  bytes_at[bytes / 2] = 5;
  TsdgPageMapping* mapping = tsdg_map_pages_ahead(shared, bytes);
  bytes_at[bytes - 1] = 9;  // the caller writes while the pages are mapped
  tsdg_map_pages_wait(mapping);
  EXPECT_EQ(bytes_at[0], 3);
  EXPECT_EQ(bytes_at[bytes / 2], 5);
  EXPECT_EQ(bytes_at[bytes - 1], 9);
  EXPECT_EQ(bytes_at[bytes / 4], 0);
  tsdg_map_pages_wait(nullptr);

  // a range unmapped before the thread is done: it stops, and the wait returns
  mapping = tsdg_map_pages_ahead(shared, bytes);
  munmap(shared, bytes);
  tsdg_map_pages_wait(mapping);
}

}  // namespace
}  // namespace tsdg
