// Large arrays in temporary files instead of anonymous memory, for a build
// that must keep its process's own memory within a budget: each array is a
// file of its own in a directory the caller names, unlinked as soon as it is
// created and mapped shared, so that the kernel can write its pages out and
// drop them under memory pressure (anonymous pages could only go to swap),
// and nothing of it outlives the mapping or the process.
#pragma once

#include <cstddef>
#include <string>

namespace tsdg {

// Arrays of at least min_bytes allocated through allocate_huge_page_backed
// from now on go to files in directory; an empty directory turns it off.
// Process-wide: every thread's allocations follow it.
void set_spill_directory(const std::string& directory, size_t min_bytes);

// A mapping of at least bytes in a new file of the spill directory, or null
// when spilling is off or, unless any_size, the array is smaller than its
// threshold. Throws
// Error(Status::OutOfMemory) when the file cannot be made or its blocks
// reserved (a full disk fails here, not later at a page fault).
void* spill_allocate(size_t bytes, bool any_size = false);

// Unmaps memory when spill_allocate returned it (true), else false.
bool spill_free(void* memory);

}  // namespace tsdg
