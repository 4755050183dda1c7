// Memory management for the GPU backend, kept apart from the algorithms (as in
// FAISS/cuVS): checked CUDA/cuBLAS calls that throw tsdg::Error, RAII device
// and pinned host buffers, a stream and a cuBLAS handle, and the device's free
// memory for sizing tiles and batches.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "types.h"

namespace tsdg::cuda {

// Throws Error(OutOfMemory) for allocation failures, Error(DeviceError) for the rest.
void check_cuda(cudaError_t status, const char* what);
// check_cuda for a copy of bytes between host memory and the device: the
// message of a failure also gives the host address, the size and whether the
// host range is page-locked at its first and its last byte, as CUDA refuses a
// range page-locked in part (invalid argument).
void check_copy(cudaError_t status, const char* what, const void* host, size_t bytes);
void check_cublas(cublasStatus_t status, const char* what);
// Checks the launch of the kernel just queued (configuration errors, earlier faults).
void check_launch(const char* kernel);

#define TSDG_CUDA_CHECK(call) ::tsdg::cuda::check_cuda((call), #call)
#define TSDG_CUBLAS_CHECK(call) ::tsdg::cuda::check_cublas((call), #call)

// A device array of T, uninitialized.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { allocate(count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }

  void allocate(size_t count) {
    release();
    if (count == 0) return;
    void* raw = nullptr;
    TSDG_CUDA_CHECK(cudaMalloc(&raw, count * sizeof(T)));
    data_ = static_cast<T*>(raw);
    count_ = count;
  }
  void release() noexcept {
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    count_ = 0;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// Page-locked host memory, so copies can overlap with kernels.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t count) { allocate(count); }
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void allocate(size_t count) {
    release();
    if (count == 0) return;
    void* raw = nullptr;
    TSDG_CUDA_CHECK(cudaMallocHost(&raw, count * sizeof(T)));
    data_ = static_cast<T*>(raw);
    count_ = count;
  }
  void release() noexcept {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    count_ = 0;
  }
  T* data() { return data_; }
  size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  size_t count_ = 0;
};

// A non-blocking stream, owned.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// A cuBLAS handle bound to a stream, owned.
class BlasHandle {
 public:
  explicit BlasHandle(cudaStream_t stream);
  ~BlasHandle();
  BlasHandle(const BlasHandle&) = delete;
  BlasHandle& operator=(const BlasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

// While it lives, the handle's products may round their inputs to TF32 on
// tensor cores (for products that only rank candidates whose distances are
// computed again exactly); exact products again after.
class Tf32Products {
 public:
  explicit Tf32Products(const BlasHandle& blas);
  ~Tf32Products();
  Tf32Products(const Tf32Products&) = delete;
  Tf32Products& operator=(const Tf32Products&) = delete;

 private:
  cublasHandle_t handle_;
};

// What every algorithm runs with: the device, its stream and cuBLAS handle.
struct DeviceContext {
  int device = 0;
  int sm_count = 0;
  Stream stream;
  BlasHandle blas{stream.get()};

  explicit DeviceContext(int device_ordinal);
};

// Bytes free on the current device, less a reserve for the runtime and cuBLAS;
// at most TSDG_GPU_MEMORY_LIMIT_MB when the environment sets it (tests).
size_t usable_device_memory();
// Whether address is device memory of the current device.
bool on_current_device(const void* address);
// Throws Error(OutOfMemory) naming what when bytes exceed usable_device_memory().
void require_device_memory(size_t bytes, const char* what);

// Host <-> device copies on a stream.
template <typename T>
void copy_to_device(T* device, const T* host, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  check_copy(cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync host to device", host, count * sizeof(T));
}
template <typename T>
void copy_to_host(T* host, const T* device, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  check_copy(cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, stream),
             "cudaMemcpyAsync device to host", host, count * sizeof(T));
}

// A matrix copied to the device (row-major, same layout).
struct DeviceMatrix {
  DeviceBuffer<float> values;
  int64_t rows = 0;
  int dim = 0;

  static DeviceMatrix upload(MatrixView view, cudaStream_t stream);
  // view's rows with its first `resident` rows copied from device_rows (on
  // this device) and only the others uploaded.
  static DeviceMatrix upload_after(MatrixView view, const float* device_rows, int64_t resident,
                                   cudaStream_t stream);
  const float* row(int64_t i) const { return values.data() + i * static_cast<int64_t>(dim); }
};

}  // namespace tsdg::cuda
