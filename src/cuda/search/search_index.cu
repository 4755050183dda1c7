#include "search_index.h"

#include <cub/cub.cuh>

#include <algorithm>
#include <cstring>
#include <string>

#include "entry_points.h"
#include "gpu_algorithms.h"
#include "device_phase_trace.h"
#include "navigating_layer.h"
#include "search_kernels.h"

namespace tsdg::cuda {
namespace {

// The batch-size threshold has the form (a * SMs + b) / d of Wang, Wang,
// Zhao, 2022, fitted to the beam-search small-batch kernel: it puts the
// switch near 4,000 queries at d = 128 on a 132-SM chip (b is 0 here).
constexpr int64_t kThresholdPerSm = 3900;
constexpr int64_t kMaxRowsPerLaunch = 1 << 16;
// only batches this large print their phases under TSDG_GPU_TRACE
constexpr int64_t kTracedBatch = 1000;
constexpr int kKernelAuto = 0;
constexpr int kKernelSmallBatch = 1;
constexpr int kKernelLargeBatch = 2;
constexpr int kKernelExactScan = 3;
// results unreached_rows asks each row's search for (a reached row is first)
constexpr int kMaxOwnResults = 8;
// The bytes of a launch's entries from the navigating layer (ids and
// distances, width of them a query): at the largest ef a launch of
// kMaxRowsPerLaunch queries would hold gigabytes of them.
constexpr int64_t kMaxLayerEntryBytes = int64_t{1} << 28;

// What the gather of payload values reads, by value into the kernel.
struct PayloadMap {
  const unsigned char* values;
  int size;
  const uint8_t* flags;
  uint8_t skip_bits;
  unsigned char missing[SearchIndex::kMaxPayloadSize];
  int64_t nodes;
};

// Counts the neighbor ids past the last node (kInvalidId pads a list): a
// corrupt list would send the kernels' reads out of the rows.
__global__ void count_ids_out_of_range_kernel(const uint32_t* ids, int64_t count, int64_t nodes,
                                              unsigned long long* out_of_range) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned long long found = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    found += ids[i] != kInvalidId && ids[i] >= nodes;
  }
  if (found > 0) atomicAdd(out_of_range, found);
}

// d_nn1+: the distance from each node to its first (nearest kept) neighbor.
template <Metric M>
__global__ void first_neighbor_distance_kernel(const float* rows, const uint32_t* neighbors, int64_t nodes, int dim,
                                               int degree, float* out) {
  const int64_t node = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (node >= nodes) return;
  const uint32_t nearest = neighbors[node * degree];
  float d = 0.0f;  // nodes without neighbors do not raise the bound
  if (nearest != kInvalidId) {
    // absolute, as graph_nn1_bound: inner products can be negative
    d = fabsf(warp_distance<M>(rows + node * dim, rows + static_cast<int64_t>(nearest) * dim, dim));
  }
  if (lane_id() == 0) out[node] = d;
}

// One thread per query: the first k_out of its k results that the flags do
// not skip, as payload values; the rest of its row gets the missing value.
__global__ void payload_gather_kernel(const uint32_t* ids, const float* dists, int64_t rows, int k,
                                      int k_out, PayloadMap map, unsigned char* out_values,
                                      float* out_dists) {
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= rows) return;
  int written = 0;
  for (int j = 0; j < k && written < k_out; ++j) {
    const uint32_t id = ids[q * k + j];
    if (id == kInvalidId || id >= map.nodes) break;
    if (map.flags != nullptr && (map.flags[id] & map.skip_bits) != 0) continue;
    unsigned char* to = out_values + (q * k_out + written) * map.size;
    const unsigned char* from = map.values + static_cast<int64_t>(id) * map.size;
    for (int b = 0; b < map.size; ++b) to[b] = from[b];
    out_dists[q * k_out + written] = dists[q * k + j];
    ++written;
  }
  for (; written < k_out; ++written) {
    unsigned char* to = out_values + (q * k_out + written) * map.size;
    for (int b = 0; b < map.size; ++b) to[b] = map.missing[b];
    out_dists[q * k_out + written] = INFINITY;
  }
}

// One thread per entry of the changed lists: each list to its node's place.
__global__ void scatter_lists_kernel(const uint32_t* nodes, const uint32_t* ids, const uint8_t* lambdas,
                                     int64_t entries, int degree, uint32_t* neighbors_out, uint8_t* lambdas_out) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= entries) return;
  const int64_t at = static_cast<int64_t>(nodes[e / degree]) * degree + e % degree;
  neighbors_out[at] = ids[e];
  lambdas_out[at] = lambdas[e];
}

// One thread per value: layer node i is node i * kLayerStride.
__global__ void gather_layer_rows_kernel(const float* rows, int64_t layer_nodes, int dim, float* layer_rows) {
  const int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (v >= layer_nodes * dim) return;
  layer_rows[v] = rows[(v / dim) * kLayerStride * dim + v % dim];
}

// The layer's walks answer with layer ids; the index's kernels start from
// node ids.
__global__ void layer_ids_to_node_ids_kernel(uint32_t* ids, int64_t count) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count || ids[i] == kInvalidId) return;
  ids[i] = static_cast<uint32_t>(ids[i] * kLayerStride);
}

void map_results_to_payload(const uint32_t* ids, const float* dists, int64_t rows, int k, int k_out,
                            const PayloadMap& map, unsigned char* out_values, float* out_dists,
                            cudaStream_t stream) {
  constexpr int kThreads = 256;
  payload_gather_kernel<<<static_cast<unsigned>((rows + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      ids, dists, rows, k, k_out, map, out_values, out_dists);
  check_launch("payload_gather_kernel");
}

}  // namespace

CudaSearchIndex::CudaSearchIndex(int device, MatrixView data, GraphView graph, Metric metric,
                                 const float* resident, int64_t resident_rows, DeviceBuffer<float> rows)
    : device_(device), host_data_(data), host_graph_(graph), metric_(metric), nodes_(graph.nodes), dim_(data.dim), degree_(graph.degree) {
  if (graph.nodes != data.rows) throw Error(Status::InvalidArgument, "graph and data sizes differ");
  if (graph.nodes == 0 || graph.degree < 1) throw Error(Status::InvalidArgument, "empty graph");
  require_device_metric(metric);
  TSDG_CUDA_CHECK(cudaSetDevice(device));
  TSDG_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  const bool rows_given = rows.size() == static_cast<size_t>(nodes_) * dim_;
  const size_t bytes = static_cast<size_t>(nodes_) * ((rows_given ? 0 : static_cast<size_t>(dim_) * 4) + degree_ * 5) +
                       HalfRowsCopy::bytes_for(nodes_, dim_);
  require_device_memory(bytes, "the GPU search index");
  ctx_ = std::make_unique<DeviceContext>(device);
  cudaStream_t stream = ctx_->stream.get();
  PhaseTrace trace("index upload", stream);
  if (rows_given) {
    data_ = std::move(rows);
  } else if (resident != nullptr) {
    data_ = std::move(DeviceMatrix::upload_after(data, resident, resident_rows, stream).values);
  } else {
    data_.allocate(static_cast<size_t>(nodes_) * dim_);
    copy_to_device(data_.data(), data.data, data_.size(), stream);
  }
  half_rows_ = HalfRowsCopy(data_.data(), nodes_, dim_, stream);
  trace.mark("rows");
  const size_t edges = static_cast<size_t>(nodes_) * degree_;
  neighbors_.allocate(edges);
  lambdas_.allocate(edges);
  copy_to_device(neighbors_.data(), graph.neighbors, edges, stream);
  copy_to_device(lambdas_.data(), graph.lambdas, edges, stream);
  check_neighbor_ids(stream);
  trace.mark("lists");
  if (metric == Metric::L2) {
    norms_.allocate(nodes_);
    compute_squared_norms(data_.data(), nodes_, dim_, norms_.data(), stream);
  }

  DeviceBuffer<float> first_distances(nodes_);
  DeviceBuffer<float> bound(1);
  dispatch_metric(metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    first_neighbor_distance_kernel<M><<<static_cast<unsigned>((nodes_ * kWarpSize + 255) / 256), 256, 0,
                                        stream>>>(data_.data(), neighbors_.data(), nodes_, dim_, degree_,
                                                  first_distances.data());
    check_launch("first_neighbor_distance_kernel");
  });
  size_t temp_bytes = 0;
  TSDG_CUDA_CHECK(cub::DeviceReduce::Max(nullptr, temp_bytes, first_distances.data(), bound.data(), nodes_, stream));
  DeviceBuffer<unsigned char> temp(temp_bytes);
  TSDG_CUDA_CHECK(cub::DeviceReduce::Max(temp.data(), temp_bytes, first_distances.data(), bound.data(), nodes_, stream));
  copy_to_host(&nn1_bound_, bound.data(), 1, stream);
  ctx_->stream.synchronize();
  trace.mark("norms and d_nn1+");
}

void CudaSearchIndex::lists_changed(const std::vector<uint32_t>& nodes) {
  for (uint32_t node : nodes) {
    if (node >= nodes_) throw Error(Status::InvalidArgument, "changed list of a node past the last");
  }
  if (nodes.empty()) return;
  // The lists go up in one copy and a kernel puts each in place: a copy of
  // each list from pageable memory would wait for the device every time.
  const size_t entries = nodes.size() * degree_;
  std::vector<uint32_t> ids(entries);
  std::vector<uint8_t> lambdas(entries);
  for (size_t i = 0; i < nodes.size(); ++i) {
    std::copy_n(host_graph_.list(nodes[i]), degree_, ids.begin() + i * degree_);
    std::copy_n(host_graph_.list_lambdas(nodes[i]), degree_, lambdas.begin() + i * degree_);
  }
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = ctx_->stream.get();
  DeviceBuffer<uint32_t> changed_nodes(nodes.size());
  DeviceBuffer<uint32_t> changed_ids(entries);
  DeviceBuffer<uint8_t> changed_lambdas(entries);
  copy_to_device(changed_nodes.data(), nodes.data(), nodes.size(), stream);
  copy_to_device(changed_ids.data(), ids.data(), entries, stream);
  copy_to_device(changed_lambdas.data(), lambdas.data(), entries, stream);
  constexpr int kThreads = 256;
  scatter_lists_kernel<<<static_cast<unsigned>((entries + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      changed_nodes.data(), changed_ids.data(), changed_lambdas.data(), static_cast<int64_t>(entries), degree_,
      neighbors_.data(), lambdas_.data());
  check_launch("scatter_lists_kernel");
  ctx_->stream.synchronize();
  navigating_.lists_changed();
}

// On the device rather than the host: a merge waits for the upload, and a
// host scan of every list would lengthen it.
void CudaSearchIndex::check_neighbor_ids(cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr unsigned kMaxBlocks = 4096;
  const int64_t count = nodes_ * degree_;
  DeviceBuffer<unsigned long long> out_of_range(1);
  TSDG_CUDA_CHECK(cudaMemsetAsync(out_of_range.data(), 0, sizeof(unsigned long long), stream));
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(kMaxBlocks, (count + kThreads - 1) / kThreads));
  count_ids_out_of_range_kernel<<<blocks, kThreads, 0, stream>>>(neighbors_.data(), count, nodes_, out_of_range.data());
  check_launch("count_ids_out_of_range_kernel");
  unsigned long long found = 0;
  copy_to_host(&found, out_of_range.data(), 1, stream);
  ctx_->stream.synchronize();
  if (found > 0) {
    throw Error(Status::InvalidArgument, std::to_string(found) + " neighbor ids out of range for " +
                                             std::to_string(nodes_) + " nodes");
  }
}

size_t CudaSearchIndex::memory_bytes() const {
  return data_.bytes() + half_rows_.bytes() + norms_.bytes() + neighbors_.bytes() + lambdas_.bytes() +
         queries_.bytes() + walk_ids_.bytes() + walk_dists_.bytes() + result_ids_.bytes() + result_dists_.bytes() +
         payload_.bytes() + payload_flags_device_.bytes() + payload_out_.bytes() + payload_dists_.bytes() +
         entries_.bytes() + entry_rows_.bytes() + entry_norms_.bytes() + entry_pick_ids_.bytes() +
         entry_pick_dists_.bytes() + entry_scratch_.query_norms.bytes() + entry_scratch_.products.bytes() +
         entry_scratch_.segment_dists.bytes() + entry_scratch_.segment_ids.bytes() + layer_bytes();
}

size_t CudaSearchIndex::layer_bytes() const {
  if (layer_ == nullptr) return 0;
  return layer_->memory_bytes() + host_layer_->memory_bytes() + layer_entry_ids_.bytes() +
         layer_entry_dists_.bytes();
}

int64_t CudaSearchIndex::small_batch_limit() const {
  return kThresholdPerSm * sm_count_ / std::max(dim_, 1);
}

void CudaSearchIndex::reserve_batch(int64_t rows, int k, int walk_k, int entry_width) {
  const size_t query_values = static_cast<size_t>(rows) * dim_;
  const size_t results = static_cast<size_t>(rows) * k;
  const size_t walked = static_cast<size_t>(rows) * walk_k;
  const size_t entries = static_cast<size_t>(rows) * entry_width;
  if (queries_.size() < query_values) queries_.allocate(query_values);
  if (layer_entry_ids_.size() < entries) {
    layer_entry_ids_.allocate(entries);
    layer_entry_dists_.allocate(entries);
  }
  if (walk_ids_.size() < walked) {
    walk_ids_.allocate(walked);
    walk_dists_.allocate(walked);
  }
  if (result_ids_.size() < results) {
    result_ids_.allocate(results);
    result_dists_.allocate(results);
    pinned_ids_.allocate(results);
    pinned_dists_.allocate(results);
  }
}

void CudaSearchIndex::prepare_entries(const SearchParams& params, const RunControl& control) {
  if (!navigating_.refresh(host_data_, host_graph_, params, control)) return;
  const std::vector<uint32_t>& entries = navigating_.entries();
  cudaStream_t stream = ctx_->stream.get();
  const auto count = static_cast<int64_t>(entries.size());
  entries_.allocate(std::max<size_t>(entries.size(), 1));
  copy_to_device(entries_.data(), entries.data(), entries.size(), stream);
  entry_rows_.allocate(std::max<size_t>(static_cast<size_t>(count) * dim_, 1));
  gather_rows(data_.data(), dim_, entries_.data(), count, entry_rows_.data(), stream);
  entry_norms_.allocate(metric_ == Metric::L2 ? std::max<size_t>(entries.size(), 1) : 0);
  if (metric_ == Metric::L2) compute_squared_norms(entry_rows_.data(), count, dim_, entry_norms_.data(), stream);
  ctx_->stream.synchronize();
  entry_count_ = static_cast<int>(entries.size());
}

void CudaSearchIndex::pick_entries(SearchLaunch& launch) {
  if (entry_count_ <= launch.ef) return;
  // a layer's walk can be wider than the exact search selects: its best
  // entries start it then
  const int count = std::min(launch.ef, kMaxExactKnnK);
  const size_t picks = static_cast<size_t>(launch.rows) * count;
  if (entry_pick_ids_.size() < picks) {
    entry_pick_ids_.allocate(picks);
    entry_pick_dists_.allocate(picks);
  }
  const ResidentRows entry_rows{entry_rows_.data(), metric_ == Metric::L2 ? entry_norms_.data() : nullptr};
  exact_knn_on_device(*ctx_, entry_rows, entry_count_, dim_, launch.queries, launch.rows, metric_, count,
                      entry_pick_ids_.data(), entry_pick_dists_.data(), entry_scratch_);
  launch.entry_picks = entry_pick_ids_.data();
  launch.entry_pick_count = count;
}

void CudaSearchIndex::walk_for_entries(const float* queries, int64_t rows, int width, cudaStream_t stream,
                                       uint32_t* ids, float* dists) {
  std::lock_guard<std::mutex> guard(mutex_);
  SearchParams params;
  params.ef = width;
  params.k = width;
  prepare_entries(params, RunControl{});
  TSDG_CUDA_CHECK(cudaStreamSynchronize(stream));
  const DeviceGraph g{half_rows_.view(), neighbors_.data(), lambdas_.data(), nodes_, dim_, degree_};
  SearchLaunch launch{g,
                      metric_,
                      queries,
                      rows,
                      width,
                      width,
                      params.lambda_limit,
                      entries_.data(),
                      entry_count_,
                      StopRule{params.slack, width, nn1_bound_, metric_ == Metric::L2},
                      ids,
                      dists};
  pick_entries(launch);
  // few queries walk in parallel only in the small-batch kernel, as the
  // index's own searches pick it
  if (rows < small_batch_limit() && width <= kGpuSmallBatchMaxEf) {
    launch_small_batch_search(launch, 0, ctx_->stream.get());
  } else {
    launch_large_batch_search(launch, ctx_->stream.get());
  }
  ctx_->stream.synchronize();
}

bool CudaSearchIndex::search_launches(MatrixView queries, const SearchParams& params,
                                      const RunControl& control,
                                      const std::function<void(int64_t, int64_t, int)>& deliver,
                                      int64_t own_row_first, bool stops_at_own_row) {
  if (queries.dim != dim_) throw Error(Status::InvalidArgument, "query dimension differs from the index");
  if (params.k < 1 || params.k > 1024) throw Error(Status::InvalidArgument, "GPU search supports 1 <= k <= 1024");
  if (params.gpu_kernel < kKernelAuto || params.gpu_kernel > kKernelExactScan) {
    throw Error(Status::InvalidArgument,
                "gpu_kernel must be 0 (auto), 1 (small batch), 2 (large batch) or 3 (exact scan)");
  }
  if (params.gpu_kernel == kKernelExactScan) return false;
  const int k = params.k;
  const int ef = std::clamp(std::max(params.ef, k), 1, kGpuSmallBatchMaxEf);
  if (params.gpu_kernel == kKernelSmallBatch && params.ef > kGpuSmallBatchMaxEf) {
    throw Error(Status::InvalidArgument,
                "the small-batch kernel supports ef up to " + std::to_string(kGpuSmallBatchMaxEf));
  }
  const bool small_batch = params.gpu_kernel == kKernelSmallBatch ||
                           (params.gpu_kernel == kKernelAuto && queries.rows < small_batch_limit() &&
                            ef <= kGpuSmallBatchMaxEf);
  if (params.entry_samples < 1) throw Error(Status::InvalidArgument, "search entry_samples must be positive");
  // the checks of unreached rows walk as the searches do (SearchIndex::set_layer)
  const bool through_layer = layer_ != nullptr;
  const int entry_width = through_layer ? NavigatingLayer::width(ef) : 0;
  if (!through_layer) prepare_entries(params, control);
  const int64_t rows_per_launch =
      through_layer ? std::clamp<int64_t>(kMaxLayerEntryBytes / (static_cast<int64_t>(entry_width) *
                                                                 (sizeof(uint32_t) + sizeof(float))),
                                          1, kMaxRowsPerLaunch)
                    : kMaxRowsPerLaunch;
  cudaStream_t stream = ctx_->stream.get();
  const DeviceGraph g{half_rows_.view(), neighbors_.data(), lambdas_.data(), nodes_, dim_, degree_};
  const int walk_k = rerank_candidate_count(k, ef);
  control.set_total(queries.rows);
  PhaseTrace trace(small_batch ? "search small" : "search large", stream, queries.rows >= kTracedBatch);
  for (int64_t first = 0; first < queries.rows; first += rows_per_launch) {
    control.throw_if_cancelled();
    const int64_t rows = std::min(rows_per_launch, queries.rows - first);
    reserve_batch(rows, k, walk_k, entry_width);
    const float* launch_queries = queries_.data();
    if (own_row_first >= 0) {
      launch_queries = data_.data() + (own_row_first + first) * dim_;
    } else {
      copy_to_device(queries_.data(), queries.row(first), static_cast<size_t>(rows) * dim_, stream);
      trace.mark("queries to the device", rows);
    }
    SearchLaunch launch{g,
                        metric_,
                        launch_queries,
                        rows,
                        walk_k,
                        ef,
                        std::clamp(params.lambda_limit, 0, 255),
                        entries_.data(),
                        entry_count_,
                        StopRule{params.slack, std::max(1, k), nn1_bound_, metric_ == Metric::L2},
                        walk_ids_.data(),
                        walk_dists_.data(),
                        own_row_first >= 0 && stops_at_own_row ? own_row_first + first : -1};
    if (through_layer) {
      layer_->walk_for_entries(launch_queries, rows, entry_width, stream, layer_entry_ids_.data(),
                               layer_entry_dists_.data());
      const int64_t entries = rows * entry_width;
      constexpr int kThreads = 256;
      layer_ids_to_node_ids_kernel<<<static_cast<unsigned>((entries + kThreads - 1) / kThreads), kThreads, 0,
                                     stream>>>(layer_entry_ids_.data(), entries);
      check_launch("layer_ids_to_node_ids_kernel");
      launch.query_entry_ids = layer_entry_ids_.data();
      launch.query_entry_dists = layer_entry_dists_.data();
      launch.query_entry_count = entry_width;
      trace.mark("layer walks", entry_width);
    } else {
      pick_entries(launch);
      if (launch.entry_picks != nullptr) trace.mark("entries picked", entry_count_);
    }
    if (small_batch) {
      launch_small_batch_search(launch, params.gpu_search_width, stream);
    } else {
      launch_large_batch_search(launch, stream);
    }
    trace.mark("kernel", ef);
    launch_exact_rerank(RerankLaunch{data_.data(), dim_, launch_queries, rows, walk_ids_.data(), walk_k, k,
                                     result_ids_.data(), result_dists_.data()},
                        metric_, stream);
    trace.mark("exact rerank", walk_k);
    deliver(first, rows, k);
    trace.mark("results to the host");
    control.add_done(rows);
  }
  return true;
}

void CudaSearchIndex::search(MatrixView queries, const SearchParams& params, uint32_t* ids,
                             float* dists, const RunControl& control) {
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = ctx_->stream.get();
  const bool searched = search_launches(queries, params, control, [&](int64_t first, int64_t rows, int k) {
    const size_t results = static_cast<size_t>(rows) * k;
    copy_to_host(pinned_ids_.data(), result_ids_.data(), results, stream);
    copy_to_host(pinned_dists_.data(), result_dists_.data(), results, stream);
    ctx_->stream.synchronize();
    std::memcpy(ids + first * k, pinned_ids_.data(), results * sizeof(uint32_t));
    std::memcpy(dists + first * k, pinned_dists_.data(), results * sizeof(float));
  });
  if (!searched) {
    const ResidentRows resident{data_.data(), norms_.data()};
    exact_knn(*ctx_, MatrixView{nullptr, nodes_, dim_}, queries, metric_, params.k, ids, dists, control,
              &resident);
  }
}

void CudaSearchIndex::set_layer(GraphView layer) {
  if (layer.nodes != 0 && layer.nodes != layer_node_count(nodes_)) {
    throw Error(Status::InvalidArgument, "search index: the layer's node count does not match the graph's");
  }
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  if (layer.nodes == 0) {
    layer_.reset();
    host_layer_.reset();
    layer_entry_ids_.release();
    layer_entry_dists_.release();
    return;
  }
  // the layer's host copy is both the CPU's walks' and what the device's
  // index of it views
  auto host = std::make_shared<NavigatingLayer>(gather_layer_rows(host_data_).view(), layer, metric_);
  const int64_t values = layer.nodes * dim_;
  DeviceBuffer<float> device_rows(static_cast<size_t>(values));
  constexpr int kThreads = 256;
  gather_layer_rows_kernel<<<static_cast<unsigned>((values + kThreads - 1) / kThreads), kThreads, 0,
                             ctx_->stream.get()>>>(data_.data(), layer.nodes, dim_, device_rows.data());
  check_launch("gather_layer_rows_kernel");
  ctx_->stream.synchronize();
  auto index = std::make_unique<CudaSearchIndex>(device_, host->rows(), host->graph(), metric_, nullptr, 0,
                                                 std::move(device_rows));
  // the old index goes before the host copy it views
  layer_ = std::move(index);
  host_layer_ = std::move(host);
}

std::shared_ptr<NavigatingLayer> CudaSearchIndex::navigating_layer() const {
  std::lock_guard<std::mutex> guard(mutex_);
  return host_layer_;
}

void CudaSearchIndex::set_payload(const void* values, int value_size, const uint8_t* flags,
                                  uint8_t skip_bits, const void* missing) {
  SearchIndex::set_payload(values, value_size, flags, skip_bits, missing);
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = ctx_->stream.get();
  payload_.allocate(payload_values_.size());
  copy_to_device(payload_.data(), payload_values_.data(), payload_values_.size(), stream);
  payload_flags_device_.allocate(payload_flags_.size());
  if (!payload_flags_.empty()) {
    copy_to_device(payload_flags_device_.data(), payload_flags_.data(), payload_flags_.size(), stream);
  }
  ctx_->stream.synchronize();
}

void CudaSearchIndex::search_payload(MatrixView queries, const SearchParams& params, int k_out,
                                     void* values, float* dists, const RunControl& control) {
  if (payload_size_ == 0) throw Error(Status::InvalidArgument, "the index has no payload");
  if (k_out < 1 || k_out > params.k) throw Error(Status::InvalidArgument, "k_out must be 1 to k");
  std::unique_lock<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = ctx_->stream.get();
  auto* out = static_cast<unsigned char*>(values);
  PayloadMap map{payload_.data(), payload_size_,
                 payload_flags_device_.size() > 0 ? payload_flags_device_.data() : nullptr,
                 payload_skip_bits_, {}, nodes_};
  std::memcpy(map.missing, payload_missing_, sizeof(map.missing));
  const bool searched = search_launches(queries, params, control, [&](int64_t first, int64_t rows, int k) {
    const size_t results = static_cast<size_t>(rows) * k_out;
    if (payload_out_.size() < results * payload_size_) {
      payload_out_.allocate(results * payload_size_);
      payload_dists_.allocate(results);
    }
    map_results_to_payload(result_ids_.data(), result_dists_.data(), rows, k, k_out, map,
                           payload_out_.data(), payload_dists_.data(), stream);
    copy_to_host(out + static_cast<size_t>(first) * k_out * payload_size_, payload_out_.data(),
                 results * payload_size_, stream);
    copy_to_host(dists + first * k_out, payload_dists_.data(), results, stream);
    ctx_->stream.synchronize();
  });
  if (!searched) {
    guard.unlock();
    SearchIndex::search_payload(queries, params, k_out, values, dists, control);
  }
}

std::vector<uint32_t> CudaSearchIndex::entry_points(const SearchParams& params,
                                                    const RunControl& control) {
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  prepare_entries(params, control);
  return navigating_.entries();
}

std::vector<uint32_t> CudaSearchIndex::unreached_rows(int64_t first, int64_t end,
                                                      const SearchParams& params,
                                                      const RunControl& control) {
  if (first < 0 || first > end || end > nodes_) {
    throw Error(Status::InvalidArgument, "unreached rows: rows out of range");
  }
  std::lock_guard<std::mutex> guard(mutex_);
  TSDG_CUDA_CHECK(cudaSetDevice(device_));
  PhaseTrace trace("unreached rows", ctx_->stream.get(), end - first >= kTracedBatch);
  prepare_entries(params, control);
  trace.mark("entry points", entry_count_);
  // Each kernel walks differently, and either may answer a session: a row
  // must be in the answer to its own vector from both. A reached row is
  // first, or after rows just as near (duplicates). The large-batch kernel
  // walks as the CPU does (one expansion at a time from the same entries),
  // so its misses stand for the CPU's too, whose walk would take far longer
  // on the host threads.
  // A search may end once it finds its own row where that row is the
  // nearest any search can find (L2, cosine): an inner product's own row
  // may yet fall out of the first results.
  const bool stops_at_own_row = metric_ != Metric::InnerProduct;
  std::vector<uint32_t> rows;
  const MatrixView own{host_data_.row(first), end - first, dim_};
  SearchParams own_params = params;
  own_params.k = std::min(params.ef, kMaxOwnResults);
  if (params.gpu_kernel != kKernelAuto && params.gpu_kernel != kKernelSmallBatch &&
      params.gpu_kernel != kKernelLargeBatch) {
    throw Error(Status::InvalidArgument, "unreached rows: gpu_kernel must be 0, 1 or 2");
  }
  for (const int kernel : {kKernelSmallBatch, kKernelLargeBatch}) {
    if (kernel == kKernelSmallBatch && params.ef > kGpuSmallBatchMaxEf) continue;
    if (params.gpu_kernel != kKernelAuto && kernel != params.gpu_kernel) continue;
    own_params.gpu_kernel = kernel;
    search_launches(
        own, own_params, RunControl{},
        [&](int64_t launch_first, int64_t launch_rows, int k) {
          const size_t results = static_cast<size_t>(launch_rows) * k;
          copy_to_host(pinned_ids_.data(), result_ids_.data(), results, ctx_->stream.get());
          ctx_->stream.synchronize();
          for (int64_t q = 0; q < launch_rows; ++q) {
            const uint32_t row = static_cast<uint32_t>(first + launch_first + q);
            const uint32_t* found = pinned_ids_.data() + q * k;
            if (std::find(found, found + k, row) == found + k) rows.push_back(row);
          }
        },
        first, stops_at_own_row);
    trace.mark(kernel == kKernelSmallBatch ? "small-batch kernel" : "large-batch kernel",
               static_cast<long long>(rows.size()));
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

}  // namespace tsdg::cuda
