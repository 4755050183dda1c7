// Arrays backed by 2 MiB pages where the kernel allows it (transparent huge
// pages in "madvise" mode, the Debian default). GNND and GGM gather rows and
// lists at random from arrays of tens to hundreds of MiB: with 4 KiB pages
// nearly every such access also misses the TLB and walks the page tables,
// with 2 MiB pages the whole working set fits in the TLB.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace tsdg {

// At least bytes, aligned to 2 MiB and advised as huge pages, or in a
// temporary file while spilling is on (spill_files.h); freed with
// free_huge_page_backed. Throws Error(Status::OutOfMemory).
void* allocate_huge_page_backed(size_t bytes);
void free_huge_page_backed(void* memory);

// std::vector's allocator on huge-page-backed memory: the k-NN lists of a
// build or merge are hundreds of MiB that a value-initialising vector first
// touches on one thread, a page fault per 4 KiB; one per 2 MiB here.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t count) { return static_cast<T*>(allocate_huge_page_backed(count * sizeof(T))); }
  void deallocate(T* memory, size_t) { free_huge_page_backed(memory); }
  // A vector sized without a value default-initialises its elements: plain
  // values stay unwritten, for arrays that their caller fills whole on its
  // threads (one thread's writing them first, a page fault at a time, takes
  // longer than the computation that overwrites them).
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible<U>::value) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const { return false; }
};

template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

// A fixed-size array of trivially copyable values on huge pages.
template <typename T>
class HugePageArray {
  static_assert(std::is_trivially_copyable<T>::value && std::is_trivially_destructible<T>::value,
                "HugePageArray holds plain values");

 public:
  HugePageArray(size_t count, const T& fill)
      : values_(static_cast<T*>(allocate_huge_page_backed(count * sizeof(T)))), size_(count) {
    std::uninitialized_fill(values_.get(), values_.get() + count, fill);
  }
  // Values left as they are: for an array the caller fills whole, on its
  // threads, so that the first touch of each page is spread over them too.
  struct Unfilled {};
  HugePageArray(size_t count, Unfilled)
      : values_(static_cast<T*>(allocate_huge_page_backed(count * sizeof(T)))), size_(count) {}

  T* data() { return values_.get(); }
  const T* data() const { return values_.get(); }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return values_.get()[i]; }
  const T& operator[](size_t i) const { return values_.get()[i]; }

 private:
  struct Free {
    void operator()(T* memory) const { free_huge_page_backed(memory); }
  };
  std::unique_ptr<T[], Free> values_;
  size_t size_;
};

}  // namespace tsdg
