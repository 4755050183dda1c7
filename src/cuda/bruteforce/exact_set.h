// The GPU ExactSet: the rows (and for L2 their squared norms) in device
// memory, in buffers grown geometrically as rows are appended, searched by
// the brute force of bruteforce.cu on the resident rows.
#pragma once

#include <memory>
#include <mutex>

#include "backend.h"
#include "device_memory.h"
#include "gpu_algorithms.h"

namespace tsdg::cuda {

class CudaExactSet final : public ExactSet {
 public:
  CudaExactSet(int device, int dim, Metric metric);

  void append(MatrixView rows, const RunControl& control) override;
  void clear() override;
  int64_t size() const override;
  size_t memory_bytes() const override;
  void search(MatrixView queries, int k, uint32_t* ids, float* dists,
              const RunControl& control) override;

 private:
  // Makes room for rows in all, moving the rows held to larger buffers.
  void reserve(int64_t rows);

  int device_;
  int dim_;
  Metric metric_;
  int64_t size_ = 0;
  int64_t capacity_ = 0;  // rows the buffers have room for
  std::unique_ptr<DeviceContext> ctx_;
  DeviceBuffer<float> rows_;   // capacity_ * dim_
  DeviceBuffer<float> norms_;  // capacity_, for L2 only
  ExactKnnScratch scratch_;    // the searches' buffers, kept between them
  mutable std::mutex mutex_;   // one call at a time on the stream and buffers
};

}  // namespace tsdg::cuda
