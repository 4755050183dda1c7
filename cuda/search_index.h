// The GPU SearchIndex: the rows and the TSDG graph resident on the device;
// each batch of queries goes to the small-batch or the large-batch kernel
// (paper 003, section 4) by the paper's threshold (a * SMs + b) / d, unless
// SearchParams::gpu_kernel forces one.
#pragma once

#include <memory>
#include <mutex>

#include "backend.h"
#include "device_memory.h"
#include "search.h"

namespace tsdg::cuda {

class CudaSearchIndex final : public SearchIndex {
 public:
  CudaSearchIndex(int device, MatrixView data, const TsdgGraph& graph, Metric metric);

  void search(MatrixView queries, const SearchParams& params, uint32_t* ids, float* dists,
              const RunControl& control) override;
  size_t memory_bytes() const override;

  // Batches smaller than this go to the small-batch kernel.
  int64_t small_batch_limit() const;
  float nn1_bound() const { return nn1_bound_; }

 private:
  void reserve_batch(int64_t rows, int k);
  // The CPU search's navigating entry points for (count, seed), on the device.
  void prepare_entries(int count, uint64_t seed);

  int device_;
  MatrixView host_data_;
  GraphView host_graph_;
  Metric metric_;
  int64_t nodes_;
  int dim_;
  int degree_;
  int sm_count_ = 0;
  float nn1_bound_ = 0.0f;
  std::unique_ptr<DeviceContext> ctx_;
  DeviceBuffer<float> data_;
  DeviceBuffer<float> norms_;  // squared norms of the rows, for the exact scan
  DeviceBuffer<uint32_t> neighbors_;
  DeviceBuffer<uint8_t> lambdas_;
  DeviceBuffer<uint32_t> entries_;
  int entry_count_ = 0;
  int entries_for_count_ = -1;
  uint64_t entries_for_seed_ = 0;
  // Per-batch buffers, grown on demand.
  DeviceBuffer<float> queries_;
  DeviceBuffer<uint32_t> result_ids_;
  DeviceBuffer<float> result_dists_;
  PinnedBuffer<uint32_t> pinned_ids_;
  PinnedBuffer<float> pinned_dists_;
  std::mutex mutex_;  // one batch at a time on the stream and buffers
};

}  // namespace tsdg::cuda
