#include "device_memory.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "host_memory.h"

namespace tsdg::cuda {
namespace {

// Copies below this go through the driver's staging; above it the two
// buffers' pinning costs less than the time their parallel copies save.
constexpr size_t kStagedCopyMin = size_t{256} << 20;
constexpr size_t kStagedCopyPart = size_t{64} << 20;
constexpr int kStagedCopyThreads = 8;

// The point in a stream past which the device no longer reads a staging
// buffer.
class StagingEvent {
 public:
  StagingEvent() { TSDG_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }
  ~StagingEvent() { cudaEventDestroy(event_); }
  StagingEvent(const StagingEvent&) = delete;
  StagingEvent& operator=(const StagingEvent&) = delete;
  void record(cudaStream_t stream) {
    TSDG_CUDA_CHECK(cudaEventRecord(event_, stream));
    recorded_ = true;
  }
  void wait() const {
    if (recorded_) TSDG_CUDA_CHECK(cudaEventSynchronize(event_));
  }

 private:
  cudaEvent_t event_ = nullptr;
  bool recorded_ = false;
};

}  // namespace

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  const std::string message = std::string("CUDA: ") + what + ": " + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation) throw Error(Status::OutOfMemory, message);
  throw Error(Status::DeviceError, message);
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  const std::string message =
      std::string("cuBLAS: ") + what + ": status " + std::to_string(static_cast<int>(status));
  if (status == CUBLAS_STATUS_ALLOC_FAILED) throw Error(Status::OutOfMemory, message);
  throw Error(Status::DeviceError, message);
}

void check_launch(const char* kernel) { check_cuda(cudaGetLastError(), kernel); }

Stream::Stream() { TSDG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
Stream::~Stream() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}
void Stream::synchronize() const { TSDG_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

BlasHandle::BlasHandle(cudaStream_t stream) {
  TSDG_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    TSDG_CUBLAS_CHECK(cublasSetStream(handle_, stream));
    // Exact results: no TF32 down-conversion in the distance products.
    TSDG_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}
Tf32Products::Tf32Products(const BlasHandle& blas) : handle_(blas.get()) {
  TSDG_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_TF32_TENSOR_OP_MATH));
}
Tf32Products::~Tf32Products() { cublasSetMathMode(handle_, CUBLAS_PEDANTIC_MATH); }

BlasHandle::~BlasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

DeviceContext::DeviceContext(int device_ordinal) : device(device_ordinal) {
  TSDG_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
}

bool on_current_device(const void* address) {
  cudaPointerAttributes attributes{};
  int device = -1;
  if (cudaPointerGetAttributes(&attributes, address) != cudaSuccess || cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer is no error to keep
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice && attributes.device == device;
}

size_t usable_device_memory() {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  TSDG_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  // cuBLAS workspaces, kernel stacks and fragmentation.
  const size_t reserve = 256u << 20;
  size_t usable = free_bytes > reserve ? free_bytes - reserve : 0;
  // A smaller budget on request, so tests can take the out-of-memory paths.
  if (const char* limit = std::getenv("TSDG_GPU_MEMORY_LIMIT_MB")) {
    const long long megabytes = std::atoll(limit);
    if (megabytes > 0) usable = std::min(usable, static_cast<size_t>(megabytes) << 20);
  }
  return usable;
}

void require_device_memory(size_t bytes, const char* what) {
  const size_t usable = usable_device_memory();
  if (bytes > usable) {
    throw Error(Status::OutOfMemory, std::string(what) + " needs " + std::to_string(bytes >> 20) +
                                         " MiB of GPU memory, " + std::to_string(usable >> 20) +
                                         " MiB usable");
  }
}

void copy_pageable_to_device(void* device, const void* host, size_t bytes, cudaStream_t stream) {
  if (bytes < kStagedCopyMin) {
    if (bytes > 0) TSDG_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
    return;
  }
  PinnedBuffer<char> staging[2] = {PinnedBuffer<char>(kStagedCopyPart), PinnedBuffer<char>(kStagedCopyPart)};
  StagingEvent read[2];
  for (size_t first = 0, part = 0; first < bytes; first += kStagedCopyPart, ++part) {
    const size_t count = std::min(kStagedCopyPart, bytes - first);
    PinnedBuffer<char>& buffer = staging[part % 2];
    read[part % 2].wait();  // the device is done with this buffer's last part
    parallel_copy(buffer.data(), static_cast<const char*>(host) + first, count, kStagedCopyThreads, false);
    TSDG_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(device) + first, buffer.data(), count,
                                    cudaMemcpyHostToDevice, stream));
    read[part % 2].record(stream);
  }
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream));
}

DeviceMatrix DeviceMatrix::upload(MatrixView view, cudaStream_t stream) {
  DeviceMatrix matrix;
  matrix.rows = view.rows;
  matrix.dim = view.dim;
  matrix.values.allocate(static_cast<size_t>(view.rows) * view.dim);
  copy_pageable_to_device(matrix.values.data(), view.data, matrix.values.bytes(), stream);
  return matrix;
}

DeviceMatrix DeviceMatrix::upload_after(MatrixView view, const float* device_rows, int64_t resident,
                                        cudaStream_t stream) {
  DeviceMatrix matrix;
  matrix.rows = view.rows;
  matrix.dim = view.dim;
  matrix.values.allocate(static_cast<size_t>(view.rows) * view.dim);
  const size_t resident_values = static_cast<size_t>(resident) * view.dim;
  TSDG_CUDA_CHECK(cudaMemcpyAsync(matrix.values.data(), device_rows, resident_values * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream));
  copy_pageable_to_device(matrix.values.data() + resident_values, view.data + resident_values,
                          (matrix.values.size() - resident_values) * sizeof(float), stream);
  return matrix;
}

}  // namespace tsdg::cuda
