#include "spill_files.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "types.h"

namespace tsdg {

namespace {

struct SpillState {
  std::mutex mutex;
  std::string directory;
  size_t min_bytes = 0;
  std::unordered_map<void*, size_t> mapped;  // address -> mapped length
};

SpillState& spill_state() {
  static SpillState state;
  return state;
}

[[noreturn]] void spill_failure(const std::string& what, int error_number) {
  throw Error(Status::OutOfMemory, what + ": " + std::strerror(error_number));
}

}  // namespace

void set_spill_directory(const std::string& directory, size_t min_bytes) {
  SpillState& state = spill_state();
  std::lock_guard<std::mutex> lock(state.mutex);
  state.directory = directory;
  state.min_bytes = min_bytes;
}

void* spill_allocate(size_t bytes, bool any_size) {
  SpillState& state = spill_state();
  std::string directory;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    if (state.directory.empty() || (!any_size && bytes < state.min_bytes)) return nullptr;
    directory = state.directory;
  }
  std::string path = directory + "/tsdg_spill.XXXXXX";
  const size_t length = bytes == 0 ? 1 : bytes;
  const int fd = mkstemp(path.data());
  if (fd < 0) spill_failure("could not create a temporary file in " + directory, errno);
  unlink(path.c_str());
  // Blocks reserved now: a shared mapping of a file that the disk cannot
  // hold would fail at a page fault later, by a signal.
  const int reserved = posix_fallocate(fd, 0, static_cast<off_t>(length));
  if (reserved != 0) {
    close(fd);
    spill_failure("could not reserve " + std::to_string(length) + " bytes in a temporary file", reserved);
  }
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (memory == MAP_FAILED) spill_failure("could not map a temporary file", map_errno);
  std::lock_guard<std::mutex> lock(state.mutex);
  state.mapped.emplace(memory, length);
  return memory;
}

bool spill_free(void* memory) {
  SpillState& state = spill_state();
  size_t length = 0;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    const auto found = state.mapped.find(memory);
    if (found == state.mapped.end()) return false;
    length = found->second;
    state.mapped.erase(found);
  }
  munmap(memory, length);
  return true;
}

}  // namespace tsdg
