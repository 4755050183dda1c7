#include "device_memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tsdg::cuda {

void check_cuda(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  const std::string message = std::string("CUDA: ") + what + ": " + cudaGetErrorString(status);
  if (status == cudaErrorMemoryAllocation) throw Error(Status::OutOfMemory, message);
  throw Error(Status::DeviceError, message);
}

namespace {

bool page_locked(const void* address) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, address) != cudaSuccess) {
    cudaGetLastError();  // not a pointer CUDA knows of: no error to keep
    return false;
  }
  return attributes.type == cudaMemoryTypeHost;
}

}  // namespace

void check_copy(cudaError_t status, const char* what, const void* host, size_t bytes) {
  if (status == cudaSuccess) return;
  const bool first_locked = page_locked(host);
  const bool last_locked = page_locked(static_cast<const char*>(host) + bytes - 1);
  const char* locked = "page-locked at neither end";
  if (first_locked && last_locked) {
    locked = "page-locked at both ends";
  } else if (first_locked) {
    locked = "page-locked at its first byte only";
  } else if (last_locked) {
    locked = "page-locked at its last byte only";
  }
  char described[256];
  std::snprintf(described, sizeof(described), "%s of %zu bytes at host address %p, %s", what, bytes, host,
                locked);
  check_cuda(status, described);
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

DeviceMatrix DeviceMatrix::upload(MatrixView view, cudaStream_t stream) {
  DeviceMatrix matrix;
  matrix.rows = view.rows;
  matrix.dim = view.dim;
  matrix.values.allocate(static_cast<size_t>(view.rows) * view.dim);
  copy_to_device(matrix.values.data(), view.data, matrix.values.size(), stream);
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
  copy_to_device(matrix.values.data() + resident_values, view.data + resident_values,
                 matrix.values.size() - resident_values, stream);
  return matrix;
}

}  // namespace tsdg::cuda
