// connect_components' scans of the whole graph (connectivity.h) on the
// device: the pointed-to flags and the weakly connected components of a copy
// of the lists there, which stage 2 of diversify leaves on the device. Only
// the results come down: a flag per node, and a root per node only when the
// graph is not one component: on the host, passes over millions of lists
// would take a large share of each merge.
#pragma once

#include <cstdint>
#include <vector>

#include "connectivity.h"
#include "device_memory.h"

namespace tsdg::cuda {

class DeviceGraphScan final : public GraphScan {
 public:
  // lists: nodes * degree ids on the device, the same as the host graph's
  // that the scans are given; they are kept in step through lists_changed.
  DeviceGraphScan(cudaStream_t stream, uint32_t* lists, int64_t nodes, int degree);

  // Device bytes the scans allocate besides the lists.
  static size_t scratch_bytes(int64_t nodes);

  std::vector<uint32_t> unpointed_nodes(GraphSpan graph, const RunControl& control) override;
  std::vector<int64_t> component_ids(GraphSpan graph, int64_t* count, const RunControl& control) override;
  void lists_changed(GraphSpan graph, const std::vector<uint32_t>& lists) override;

 private:
  void check_shape(GraphSpan graph) const;

  cudaStream_t stream_;
  uint32_t* lists_;
  int64_t nodes_;
  int degree_;
  DeviceBuffer<uint32_t> parent_;
  DeviceBuffer<uint8_t> flags_;
  DeviceBuffer<unsigned long long> root_count_;
};

}  // namespace tsdg::cuda
