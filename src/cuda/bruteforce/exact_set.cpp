#include "exact_set.h"

#include <algorithm>

#include "gpu_algorithms.h"

namespace tsdg::cuda {
namespace {

// The first buffers' rows: appends of a row or two at a time do not move the
// set at each of the first few.
constexpr int64_t kInitialCapacityRows = 1024;

}  // namespace

CudaExactSet::CudaExactSet(int device, int dim, Metric metric)
    : device_(device), dim_(dim), metric_(metric) {
  if (dim < 1) throw Error(Status::InvalidArgument, "dimension must be positive");
  TSDG_CUDA_CHECK(cudaSetDevice(device));
  ctx_ = std::make_unique<DeviceContext>(device);
}

void CudaExactSet::reserve(int64_t rows) {
  if (rows <= capacity_) return;
  // Half as much again at least: a set filled a few rows at a time is moved
  // a logarithmic number of times, without the device memory that doubling
  // would leave unused.
  const int64_t capacity = std::max({rows, capacity_ + capacity_ / 2, kInitialCapacityRows});
  const bool with_norms = metric_ == Metric::L2;
  require_device_memory(static_cast<size_t>(capacity) * (dim_ + (with_norms ? 1 : 0)) * sizeof(float),
                        "the GPU exact set");
  DeviceBuffer<float> grown_rows(static_cast<size_t>(capacity) * dim_);
  DeviceBuffer<float> grown_norms(with_norms ? capacity : 0);
  if (size_ > 0) {
    cudaStream_t stream = ctx_->stream.get();
    TSDG_CUDA_CHECK(cudaMemcpyAsync(grown_rows.data(), rows_.data(),
                                    static_cast<size_t>(size_) * dim_ * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream));
    if (with_norms) {
      TSDG_CUDA_CHECK(cudaMemcpyAsync(grown_norms.data(), norms_.data(), size_ * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream));
    }
    ctx_->stream.synchronize();  // the old buffers are freed below
  }
  rows_ = std::move(grown_rows);
  norms_ = std::move(grown_norms);
  capacity_ = capacity;
}

void CudaExactSet::append(MatrixView rows, const RunControl& /*control*/) {
  std::lock_guard<std::mutex> guard(mutex_);
  check_append(rows, dim_, size_);
  if (rows.rows == 0) return;
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  reserve(size_ + rows.rows);
  cudaStream_t stream = ctx_->stream.get();
  float* first_new = rows_.data() + size_ * dim_;
  copy_to_device(first_new, rows.data, static_cast<size_t>(rows.rows) * dim_, stream);
  if (metric_ == Metric::L2) {
    compute_squared_norms(first_new, rows.rows, dim_, norms_.data() + size_, stream);
  }
  // The caller may reuse its rows once this returns (pinned ones are read by
  // the copy itself), and the new rows count only once they are there.
  ctx_->stream.synchronize();
  size_ += rows.rows;
}

void CudaExactSet::clear() {
  std::lock_guard<std::mutex> guard(mutex_);
  size_ = 0;
}

int64_t CudaExactSet::size() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return size_;
}

size_t CudaExactSet::memory_bytes() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return rows_.bytes() + norms_.bytes();
}

void CudaExactSet::search(MatrixView queries, int k, uint32_t* ids, float* dists,
                          const RunControl& control) {
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  const ResidentRows resident{rows_.data(), norms_.data()};
  exact_knn(*ctx_, MatrixView{nullptr, size_, dim_}, queries, metric_, k, ids, dists, control,
            &resident, &scratch_);
}

}  // namespace tsdg::cuda
