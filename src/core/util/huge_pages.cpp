#include "huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "spill_files.h"
#include "types.h"

namespace tsdg {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kCacheLine = 64;
}  // namespace

void* allocate_huge_page_backed(size_t bytes) {
  if (void* spilled = spill_allocate(bytes)) return spilled;
  // Arrays under half a huge page are not worth one; aligned_alloc wants a
  // multiple of the alignment, and a zero-size request still gets a block.
  const size_t alignment = bytes < kHugePage / 2 ? kCacheLine : kHugePage;
  const size_t rounded = std::max(alignment, (bytes + alignment - 1) / alignment * alignment);
  void* memory = std::aligned_alloc(alignment, rounded);
  if (memory == nullptr) {
    throw Error(Status::OutOfMemory, "out of memory allocating " + std::to_string(bytes) + " bytes");
  }
#ifdef MADV_HUGEPAGE
  // Only advice: without huge pages the memory works the same, only slower.
  if (alignment == kHugePage) madvise(memory, rounded, MADV_HUGEPAGE);
#endif
  return memory;
}

void free_huge_page_backed(void* memory) {
  if (!spill_free(memory)) std::free(memory);
}

}  // namespace tsdg
