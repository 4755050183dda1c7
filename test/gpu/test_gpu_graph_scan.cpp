// The device's scans for connect_components (cuda/graph_scan.h) against the
// host's: the same unpointed nodes and the same component ids, on lists of
// one and two warps' width, lists that end early (with ids after their first
// kInvalidId, which a scan must not read), and again after the host changes
// some lists.
#include <cuda_runtime.h>

#include <memory>
#include <random>

#include "connectivity.h"
#include "gpu_test_support.h"
#include "graph_scan.h"

namespace tsdg {
namespace {

using gpu_testing::cpu_control;

struct DeviceFree {
  void operator()(void* address) const { cudaFree(address); }
};
struct StreamDestroy {
  void operator()(CUstream_st* stream) const { cudaStreamDestroy(stream); }
};

// nodes in `groups` groups by node % groups; each list has 0..degree ids
// of its own group, and one list in twenty an id of another group after its end
TsdgGraph grouped_graph(int64_t nodes, int degree, int groups, uint64_t seed) {
  TsdgGraph owned(nodes, degree);
  const GraphSpan graph = GraphSpan::of(owned);
  std::mt19937_64 random(seed);
  std::fill(owned.neighbors.begin(), owned.neighbors.end(), kInvalidId);
  const int64_t per_group = nodes / groups;
  for (int64_t u = 0; u < nodes; ++u) {
    const int64_t group = u % groups;
    const int valid = static_cast<int>(random() % (degree + 1)) / (random() % 3 == 0 ? degree : 1);
    for (int j = 0; j < valid; ++j) {
      const int64_t member = group + groups * static_cast<int64_t>(random() % per_group);
      graph.list(u)[j] = static_cast<uint32_t>(member);
    }
    if (valid + 1 < degree && random() % 20 == 0) graph.list(u)[valid + 1] = static_cast<uint32_t>(random() % nodes);
  }
  return owned;
}

void expect_same_scans(HostGraphScan& host, cuda::DeviceGraphScan& device, GraphSpan graph) {
  const RunControl control = cpu_control();
  EXPECT_EQ(device.unpointed_nodes(graph, control), host.unpointed_nodes(graph, control));
  int64_t host_count = 0;
  int64_t device_count = 0;
  const std::vector<int64_t> host_ids = host.component_ids(graph, &host_count, control);
  const std::vector<int64_t> device_ids = device.component_ids(graph, &device_count, control);
  ASSERT_EQ(device_count, host_count);
  if (host_count > 1) {
    EXPECT_EQ(device_ids, host_ids);
  } else {
    EXPECT_TRUE(device_ids.empty());
  }
}

TEST(GpuGraphScan, SameUnpointedNodesAndComponentsAsTheHost) {
  TSDG_REQUIRE_GPU();
  (void)gpu_backend;
  CUstream_st* raw_stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&raw_stream), cudaSuccess);
  const std::unique_ptr<CUstream_st, StreamDestroy> stream(raw_stream);
  for (const int degree : {8, 40}) {
    SCOPED_TRACE("degree " + std::to_string(degree));
    TsdgGraph owned = grouped_graph(200003, degree, 700, 17 + degree);
    const GraphSpan graph = GraphSpan::of(owned);
    void* raw_lists = nullptr;
    ASSERT_EQ(cudaMalloc(&raw_lists, owned.neighbors.size() * sizeof(uint32_t)), cudaSuccess);
    const std::unique_ptr<void, DeviceFree> lists(raw_lists);
    ASSERT_EQ(cudaMemcpy(raw_lists, owned.neighbors.data(), owned.neighbors.size() * sizeof(uint32_t),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    HostGraphScan host;
    cuda::DeviceGraphScan device(stream.get(), static_cast<uint32_t*>(raw_lists), graph.nodes, degree);
    expect_same_scans(host, device, graph);

    // groups joined by an edge, lists emptied, and every list of group 0
    // rewritten to join the others, in turn
    std::mt19937_64 random(5);
    std::vector<uint32_t> changed;
    for (int i = 0; i < 300; ++i) {
      const auto u = static_cast<uint32_t>(random() % graph.nodes);
      graph.list(u)[0] = static_cast<uint32_t>(random() % graph.nodes);
      if (i % 3 == 0) std::fill(graph.list(u), graph.list(u) + degree, kInvalidId);
      changed.push_back(u);
    }
    host.lists_changed(graph, changed);
    device.lists_changed(graph, changed);
    expect_same_scans(host, device, graph);

    changed.clear();
    for (uint32_t u = 0; u + 1 < graph.nodes; ++u) {
      graph.list(u)[0] = u + 1;
      changed.push_back(u);
    }
    host.lists_changed(graph, changed);
    device.lists_changed(graph, changed);
    expect_same_scans(host, device, graph);
  }
}

}  // namespace
}  // namespace tsdg
