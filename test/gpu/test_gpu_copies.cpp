// Copies between host memory and the device (device_memory.h): CUDA refuses
// a host range page-locked in part, which is why the GPU worker page-locks a
// graph's k-NN lists only in pages that hold nothing else, and the failed
// copy's message says where the range is page-locked; a range page-locked
// whole is copied.
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "device_memory.h"
#include "gpu_test_support.h"

namespace tsdg {
namespace {

TEST(GpuCopies, HostRangePageLockedInPartIsRefusedAndNamed) {
  TSDG_REQUIRE_GPU();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* mapping = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  char* host = static_cast<char*>(mapping);
  std::memset(host, 7, 2 * page);
  // the first page only, as page-locking a heap array's pages would lock the
  // start of the array after it
  gpu_backend.pin_host_memory(host, page);
  cuda::DeviceBuffer<char> device(2 * page);
  cuda::Stream stream;

  std::string message;
  try {
    cuda::copy_to_device(device.data(), host + page / 2, page, stream.get());
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("page-locked at its first byte only"), std::string::npos) << message;
  EXPECT_NE(message.find(std::to_string(page) + " bytes"), std::string::npos) << message;

  cuda::copy_to_device(device.data(), host, page, stream.get());
  char back = 0;
  cuda::copy_to_host(&back, device.data() + page - 1, 1, stream.get());
  stream.synchronize();
  EXPECT_EQ(back, 7);

  gpu_backend.unpin_host_memory(host);
  munmap(mapping, 2 * page);
}

}  // namespace
}  // namespace tsdg
