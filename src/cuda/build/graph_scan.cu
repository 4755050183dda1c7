// The scans of connect_components on the device (graph_scan.h):
//   mark_pointed_kernel     clears the flag of every node a list points to
//   unite_edges_kernel      joins the trees of each edge's ends (union-find)
//   write_roots_kernel      every node's root, and the count of roots
//   scatter_lists_kernel    the lists the host changed, into the device copy
// The union-find is the GPU form of the host's (connectivity.cpp): a root is
// only ever hooked, by compare-and-swap, under a smaller root, so each set
// ends rooted at its smallest node and the ids equal the host's.
#include "graph_scan.h"

#include <string>

#include "types.h"

namespace tsdg::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>((threads + kThreads - 1) / kThreads); }

// Calls edge(u, v) for each id v of list u up to its first kInvalidId, as the
// host reads a list; one warp per list, so the reads are coalesced.
template <typename Edge>
__device__ void for_each_edge_of_warp_list(const uint32_t* lists, int64_t nodes, int degree, Edge edge) {
  const int64_t u = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (u >= nodes) return;  // the whole warp: blockDim is a multiple of the warp
  const uint32_t* list = lists + u * degree;
  for (int first = 0; first < degree; first += kWarp) {
    const int j = first + lane;
    const uint32_t v = j < degree ? list[j] : kInvalidId;
    const unsigned invalid = __ballot_sync(kFullMask, v == kInvalidId);
    const int valid = invalid == 0 ? kWarp : __ffs(static_cast<int>(invalid)) - 1;
    if (lane < valid) edge(static_cast<uint32_t>(u), v);
    if (valid < kWarp) return;
  }
}

// x's root, halving the path on the way. Every parent is smaller than its
// child, so writing a grandparent keeps that order: the races between
// threads only shorten paths.
__device__ uint32_t find_root(uint32_t* parent, uint32_t x) {
  volatile uint32_t* up = parent;
  for (;;) {
    const uint32_t p = up[x];
    if (p == x) return x;
    const uint32_t grandparent = up[p];
    if (grandparent == p) return p;
    up[x] = grandparent;
    x = grandparent;
  }
}

__device__ void unite(uint32_t* parent, uint32_t a, uint32_t b) {
  a = find_root(parent, a);
  b = find_root(parent, b);
  while (a != b) {
    const uint32_t high = max(a, b);
    const uint32_t low = min(a, b);
    const uint32_t seen = atomicCAS(&parent[high], high, low);
    if (seen == high) return;
    // high was hooked meanwhile: its new parent is in its set
    a = find_root(parent, seen);
    b = find_root(parent, low);
  }
}

__global__ void mark_pointed_kernel(const uint32_t* lists, int64_t nodes, int degree, uint8_t* unpointed) {
  for_each_edge_of_warp_list(lists, nodes, degree, [&](uint32_t, uint32_t v) { unpointed[v] = 0; });
}

__global__ void first_parents_kernel(uint32_t* parent, int64_t nodes) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v < nodes) parent[v] = static_cast<uint32_t>(v);
}

__global__ void unite_edges_kernel(const uint32_t* lists, int64_t nodes, int degree, uint32_t* parent) {
  for_each_edge_of_warp_list(lists, nodes, degree, [&](uint32_t u, uint32_t v) { unite(parent, u, v); });
}

__global__ void write_roots_kernel(uint32_t* parent, int64_t nodes, unsigned long long* roots) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool is_root = false;
  if (v < nodes) {
    const uint32_t root = find_root(parent, static_cast<uint32_t>(v));
    parent[v] = root;
    is_root = root == v;
  }
  const int block_roots = __syncthreads_count(is_root);
  if (threadIdx.x == 0 && block_roots > 0) atomicAdd(roots, static_cast<unsigned long long>(block_roots));
}

__global__ void scatter_lists_kernel(const uint32_t* changed_ids, const uint32_t* changed_lists, int64_t count,
                                     int degree, uint32_t* lists) {
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= count * degree) return;
  const int64_t list = changed_lists[at / degree];
  lists[list * degree + at % degree] = changed_ids[at];
}

}  // namespace

DeviceGraphScan::DeviceGraphScan(cudaStream_t stream, uint32_t* lists, int64_t nodes, int degree)
    : stream_(stream), lists_(lists), nodes_(nodes), degree_(degree), root_count_(1) {}

size_t DeviceGraphScan::scratch_bytes(int64_t nodes) {
  return static_cast<size_t>(nodes) * (sizeof(uint32_t) + sizeof(uint8_t)) + sizeof(unsigned long long);
}

void DeviceGraphScan::check_shape(GraphSpan graph) const {
  if (graph.nodes != nodes_ || graph.degree != degree_) {
    throw Error(Status::Internal, "graph scan: the host graph is not the one on the device");
  }
}

std::vector<uint32_t> DeviceGraphScan::unpointed_nodes(GraphSpan graph, const RunControl&) {
  check_shape(graph);
  if (flags_.size() == 0) flags_.allocate(static_cast<size_t>(nodes_));
  TSDG_CUDA_CHECK(cudaMemsetAsync(flags_.data(), 1, flags_.bytes(), stream_));
  mark_pointed_kernel<<<blocks_for(nodes_ * kWarp), kThreads, 0, stream_>>>(lists_, nodes_, degree_,
                                                                             flags_.data());
  check_launch("mark_pointed_kernel");
  std::vector<uint8_t> unpointed_flag(static_cast<size_t>(nodes_));
  copy_to_host(unpointed_flag.data(), flags_.data(), unpointed_flag.size(), stream_);
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<uint32_t> unpointed;
  for (int64_t v = 0; v < nodes_; ++v) {
    if (unpointed_flag[v] != 0) unpointed.push_back(static_cast<uint32_t>(v));
  }
  return unpointed;
}

std::vector<int64_t> DeviceGraphScan::component_ids(GraphSpan graph, int64_t* count, const RunControl&) {
  check_shape(graph);
  if (parent_.size() == 0) parent_.allocate(static_cast<size_t>(nodes_));
  first_parents_kernel<<<blocks_for(nodes_), kThreads, 0, stream_>>>(parent_.data(), nodes_);
  check_launch("first_parents_kernel");
  unite_edges_kernel<<<blocks_for(nodes_ * kWarp), kThreads, 0, stream_>>>(lists_, nodes_, degree_,
                                                                            parent_.data());
  check_launch("unite_edges_kernel");
  TSDG_CUDA_CHECK(cudaMemsetAsync(root_count_.data(), 0, root_count_.bytes(), stream_));
  write_roots_kernel<<<blocks_for(nodes_), kThreads, 0, stream_>>>(parent_.data(), nodes_, root_count_.data());
  check_launch("write_roots_kernel");
  unsigned long long roots = 0;
  copy_to_host(&roots, root_count_.data(), 1, stream_);
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (roots <= 1) {
    *count = static_cast<int64_t>(roots);
    return {};
  }
  std::vector<uint32_t> root_of(static_cast<size_t>(nodes_));
  copy_to_host(root_of.data(), parent_.data(), root_of.size(), stream_);
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return component_ids_of_roots(root_of, count);
}

void DeviceGraphScan::lists_changed(GraphSpan graph, const std::vector<uint32_t>& lists) {
  check_shape(graph);
  if (lists.empty()) return;
  const auto count = static_cast<int64_t>(lists.size());
  std::vector<uint32_t> ids(static_cast<size_t>(count) * degree_);
  for (int64_t i = 0; i < count; ++i) {
    const uint32_t* list = graph.list(lists[i]);
    std::copy(list, list + degree_, ids.begin() + i * degree_);
  }
  DeviceBuffer<uint32_t> changed_ids(ids.size());
  DeviceBuffer<uint32_t> changed_lists(lists.size());
  copy_to_device(changed_ids.data(), ids.data(), ids.size(), stream_);
  copy_to_device(changed_lists.data(), lists.data(), lists.size(), stream_);
  scatter_lists_kernel<<<blocks_for(count * degree_), kThreads, 0, stream_>>>(
      changed_ids.data(), changed_lists.data(), count, degree_, lists_);
  check_launch("scatter_lists_kernel");
  // the buffers are freed on return, and the host vectors they came from
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace tsdg::cuda
