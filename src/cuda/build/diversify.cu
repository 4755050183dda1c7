// TSDG diversification (Wang, Wang, Zhao, 2022, section 3) on the device, one list per
// block, the k-NN lists taken (uploaded from the host, or read where GNND left
// them on the device) and the results downloaded a batch of nodes at a time:
//   prune_relaxed_kernel    stage 1: relaxed occlusion (Inequation 2, alpha)
//   count/fill_reverse      the pruned graph's reverse edges as sorted CSR lists
//   occlusion_rank_kernel   stage 2: forward + closest reverse edges (<= 2R),
//                           occlusion factors (Inequation 1), sort by (λ, distance),
//                           drop λ > λ0, keep R
// then the components are linked as on the CPU (connectivity.h), the host
// adding the bridges and the device scanning the lists (graph_scan.h) where
// they fit on it whole.
// The same rules, bounds and tie-breaks as the CPU diversify_tsdg.
#include <cub/cub.cuh>

#include <algorithm>
#include <string>

#include "connectivity.h"
#include "distance.cuh"
#include "gpu_algorithms.h"
#include "graph_scan.h"
#include "pairwise.cuh"
#include "device_phase_trace.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

constexpr int kMaxList = kMaxDiversifyList;
constexpr int kPairDims = 16;
constexpr int kThreads = 256;
constexpr int64_t kBatchNodes = 1 << 18;

using ListScratch = TriangleScratch<kMaxList, kPairDims>;

__device__ __forceinline__ float relaxed(float m, float alpha) { return m >= 0.0f ? alpha * m : m / alpha; }

// Distances of equal sign order like their bit patterns once flipped, so
// (distance, id) packs into one sortable 64-bit key.
__device__ __forceinline__ uint64_t edge_key(float dist, uint32_t id) {
  uint32_t bits = __float_as_uint(dist);
  bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<uint64_t>(bits) << 32) | id;
}
__device__ __forceinline__ float key_dist(uint64_t key) {
  uint32_t bits = static_cast<uint32_t>(key >> 32);
  bits = (bits & 0x80000000u) ? (bits & 0x7fffffffu) : ~bits;
  return __uint_as_float(bits);
}
__device__ __forceinline__ uint32_t key_id(uint64_t key) { return static_cast<uint32_t>(key); }

// Sorts (dists, ids)[0, count) into (out_dists, out_ids) by (distance, id);
// equal pairs keep their order. Block-wide.
__device__ void block_rank_sort(const float* dists, const uint32_t* ids, int count,
                                float* out_dists, uint32_t* out_ids) {
  for (int i = threadIdx.x; i < count; i += blockDim.x) {
    int rank = 0;
    for (int j = 0; j < count; ++j) {
      if (pair_less(dists[j], ids[j], dists[i], ids[i]) ||
          (j < i && dists[j] == dists[i] && ids[j] == ids[i])) {
        ++rank;
      }
    }
    out_dists[rank] = dists[i];
    out_ids[rank] = ids[i];
  }
  __syncthreads();
}

struct PruneShared {
  ListScratch scratch;
  float raw_dists[kMaxList];
  uint32_t raw_ids[kMaxList];
  float dists[kMaxList];
  uint32_t ids[kMaxList];
  int kept[kMaxList];
};

template <Metric M>
__global__ void __launch_bounds__(kThreads)
    prune_relaxed_kernel(const uint32_t* knn_ids, const float* knn_dists, int k, int64_t first_node,
                         const float* data, int dim, float alpha, uint32_t* pruned_ids,
                         float* pruned_dists, int* pruned_count) {
  __shared__ PruneShared shared;
  const int64_t local = blockIdx.x;
  const int64_t node = first_node + local;
  const int tid = threadIdx.x;
  bool valid = false;
  if (tid < k) {
    const uint32_t id = knn_ids[local * k + tid];
    valid = id != kInvalidId && id != static_cast<uint32_t>(node);
    shared.raw_ids[tid] = id;
    shared.raw_dists[tid] = knn_dists[local * k + tid];
  }
  const int candidates = __syncthreads_count(valid);
  // Invalid entries and self go last (+inf, kInvalidId) and are cut off.
  if (tid < k && !valid) {
    shared.raw_ids[tid] = kInvalidId;
    shared.raw_dists[tid] = INFINITY;
  }
  __syncthreads();
  block_rank_sort(shared.raw_dists, shared.raw_ids, k, shared.dists, shared.ids);
  block_triangle_distances<M>(shared.ids, candidates, data, dim, shared.scratch);

  if (tid < kWarpSize) {
    int kept = 0;
    for (int j = 0; j < candidates; ++j) {
      const float dj = shared.dists[j];
      bool occluded = false;
      for (int i0 = 0; i0 < kept && !occluded; i0 += kWarpSize) {
        const int i = i0 + tid;
        bool hit = false;
        if (i < kept) {
          const int ki = shared.kept[i];
          hit = shared.ids[ki] == shared.ids[j] ||
                (relaxed(shared.dists[ki], alpha) < dj &&
                 relaxed(shared.scratch.pairs[triangle_index(ki, j)], alpha) < dj);
        }
        occluded = __any_sync(kFullMask, hit);
      }
      if (!occluded) {
        if (tid == 0) shared.kept[kept] = j;
        ++kept;
      }
      __syncwarp();
    }
    for (int i = tid; i < kept; i += kWarpSize) {
      pruned_ids[node * k + i] = shared.ids[shared.kept[i]];
      pruned_dists[node * k + i] = shared.dists[shared.kept[i]];
    }
    if (tid == 0) pruned_count[node] = kept;
  }
}

__global__ void count_reverse_kernel(const uint32_t* pruned_ids, const int* pruned_count,
                                     int64_t nodes, int k, int* reverse_count) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t node = index / k;
  const int slot = static_cast<int>(index % k);
  if (node >= nodes || slot >= pruned_count[node]) return;
  atomicAdd(reverse_count + pruned_ids[index], 1);
}

__global__ void fill_reverse_kernel(const uint32_t* pruned_ids, const float* pruned_dists,
                                    const int* pruned_count, int64_t nodes, int k,
                                    const int64_t* offsets, int* fill, uint64_t* keys) {
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t node = index / k;
  const int slot = static_cast<int>(index % k);
  if (node >= nodes || slot >= pruned_count[node]) return;
  const uint32_t target = pruned_ids[index];
  const int position = atomicAdd(fill + target, 1);
  keys[offsets[target] + position] = edge_key(pruned_dists[index], static_cast<uint32_t>(node));
}

struct RankShared {
  ListScratch scratch;
  float gathered_dists[kMaxList];
  uint32_t gathered_ids[kMaxList];
  float dists[kMaxList];
  uint32_t ids[kMaxList];
  int lambdas[kMaxList];
  int size;
};

template <Metric M>
__global__ void __launch_bounds__(kThreads)
    occlusion_rank_kernel(const uint32_t* pruned_ids, const float* pruned_dists,
                          const int* pruned_count, int k, const int64_t* offsets,
                          const uint64_t* reverse_keys, int64_t first_node, const float* data,
                          int dim, int degree, int lambda0, uint32_t* out_ids,
                          uint8_t* out_lambdas) {
  __shared__ RankShared shared;
  const int64_t local = blockIdx.x;
  const int64_t node = first_node + local;
  const int tid = threadIdx.x;
  const int forward = pruned_count[node];
  const int limit = 2 * degree;
  if (tid < forward) {
    shared.gathered_ids[tid] = pruned_ids[node * k + tid];
    shared.gathered_dists[tid] = pruned_dists[node * k + tid];
  }
  __syncthreads();
  // Reverse edges, closest first, skipping those already forward, until the
  // list holds 2R.
  if (tid < kWarpSize) {
    int size = forward;
    const int64_t begin = offsets[node];
    const int64_t end = offsets[node + 1];
    for (int64_t e0 = begin; e0 < end && size < limit; e0 += kWarpSize) {
      const int64_t e = e0 + tid;
      bool take = false;
      uint64_t key = 0;
      if (e < end) {
        key = reverse_keys[e];
        take = true;
        for (int j = 0; j < forward && take; ++j) take = shared.gathered_ids[j] != key_id(key);
      }
      const unsigned mask = __ballot_sync(kFullMask, take);
      const int position = size + __popc(mask & ((1u << tid) - 1u));
      if (take && position < limit) {
        shared.gathered_ids[position] = key_id(key);
        shared.gathered_dists[position] = key_dist(key);
      }
      size = min(limit, size + __popc(mask));
    }
    if (tid == 0) shared.size = max(size, forward);
  }
  __syncthreads();
  const int size = shared.size;
  block_rank_sort(shared.gathered_dists, shared.gathered_ids, size, shared.dists, shared.ids);
  block_triangle_distances<M>(shared.ids, size, data, dim, shared.scratch);

  // λ_j: the closer edges i whose endpoint is nearer to x_j than the node is.
  for (int j = tid; j < size; j += blockDim.x) {
    int lambda = 0;
    const float dj = shared.dists[j];
    for (int i = 0; i < j && lambda <= lambda0; ++i) {
      if (shared.dists[i] < dj && shared.scratch.pairs[triangle_index(i, j)] < dj) ++lambda;
    }
    shared.lambdas[j] = lambda;
  }
  __syncthreads();
  uint32_t* out_row = out_ids + local * degree;
  uint8_t* out_lambda_row = out_lambdas + local * degree;
  for (int j = tid; j < degree; j += blockDim.x) {
    out_row[j] = kInvalidId;
    out_lambda_row[j] = 0;
  }
  __syncthreads();
  for (int j = tid; j < size; j += blockDim.x) {
    const int lambda = shared.lambdas[j];
    if (lambda > lambda0) continue;
    int rank = 0;
    for (int i = 0; i < size; ++i) {
      const int other = shared.lambdas[i];
      if (other <= lambda0 && (other < lambda || (other == lambda && i < j))) ++rank;
    }
    if (rank < degree) {
      out_row[rank] = shared.ids[j];
      out_lambda_row[rank] = static_cast<uint8_t>(lambda);
    }
  }
}

unsigned blocks_for(int64_t items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

// The k-NN lists diversify reads: host arrays are uploaded a batch at a time,
// device arrays are read in place.
struct KnnLists {
  const uint32_t* ids;
  const float* dists;
  int k;
  bool on_device;
};

void check_params(int k, const DiversifyParams& params) {
  if (k < 1 || k > kMaxList) {
    throw Error(Status::InvalidArgument, "GPU diversify supports k-NN lists of 1.." + std::to_string(kMaxList));
  }
  if (params.degree < 1 || 2 * params.degree > kMaxList) {
    throw Error(Status::InvalidArgument, "GPU diversify supports degree 1.." + std::to_string(kMaxList / 2));
  }
  if (!(params.alpha >= 1.0f)) throw Error(Status::InvalidArgument, "diversify: alpha must be >= 1");
  if (params.lambda0 < 0 || params.lambda0 > 254) {
    throw Error(Status::InvalidArgument, "diversify: lambda0 must be in [0, 254]");
  }
}

void validate(MatrixView data, const KnnGraph& knn, const DiversifyParams& params) {
  if (knn.nodes != data.rows) throw Error(Status::InvalidArgument, "diversify: graph and data sizes differ");
  check_params(knn.k, params);
  for (uint32_t id : knn.ids) {
    if (id != kInvalidId && id >= static_cast<uint64_t>(knn.nodes)) {
      throw Error(Status::InvalidArgument, "diversify: neighbor id " + std::to_string(id) + " out of range");
    }
  }
}

// Both stages on device_rows (data's rows on the device; data itself is read
// on the host by the component linking), into graph (data.rows lists of
// params.degree, every slot written). With relinked (a merge's, merge.h),
// stage 2 runs in Phase::Link, its progress counting the lists written out
// (in row order), and the linking marks in relinked the lists it changes.
void diversify_lists(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                     const KnnLists& knn, const DiversifyParams& params, const RunControl& control,
                     GraphSpan graph, uint8_t* relinked, const std::function<void()>& before_stage_two) {
  const int64_t n = data.rows;
  const int k = knn.k;
  const int degree = params.degree;
  if (n == 0) return;
  cudaStream_t stream = ctx.stream.get();
  const int64_t batch = std::min<int64_t>(n, kBatchNodes);
  const size_t pruned_bytes = static_cast<size_t>(n) * k * (4 + 4 + 8) + static_cast<size_t>(n) * 24;
  const size_t batch_bytes = static_cast<size_t>(batch) * ((knn.on_device ? 0 : k * 8) + degree * 5);
  require_device_memory(pruned_bytes + batch_bytes, "diversification of this graph");
  // stage 2's lists stay on the device whole for the component scans
  const size_t scanned_bytes = static_cast<size_t>(n - batch) * degree * 4 + DeviceGraphScan::scratch_bytes(n);
  const bool scan_on_device = pruned_bytes + batch_bytes + scanned_bytes <= usable_device_memory();
  control.set_total(2 * n);
  PhaseTrace trace("diversify", stream);

  DeviceBuffer<uint32_t> batch_ids(knn.on_device ? 0 : static_cast<size_t>(batch) * k);
  DeviceBuffer<float> batch_dists(knn.on_device ? 0 : static_cast<size_t>(batch) * k);
  DeviceBuffer<uint32_t> pruned_ids(static_cast<size_t>(n) * k);
  DeviceBuffer<float> pruned_dists(static_cast<size_t>(n) * k);
  DeviceBuffer<int> pruned_count(n);

  for (int64_t first = 0; first < n; first += batch) {
    control.throw_if_cancelled();
    const int64_t count = std::min(batch, n - first);
    const uint32_t* list_ids = knn.ids + first * k;
    const float* list_dists = knn.dists + first * k;
    if (!knn.on_device) {
      copy_to_device(batch_ids.data(), list_ids, static_cast<size_t>(count) * k, stream);
      copy_to_device(batch_dists.data(), list_dists, static_cast<size_t>(count) * k, stream);
      list_ids = batch_ids.data();
      list_dists = batch_dists.data();
    }
    dispatch_metric(metric, [&](auto tag) {
      constexpr Metric M = decltype(tag)::value;
      prune_relaxed_kernel<M><<<static_cast<unsigned>(count), kThreads, 0, stream>>>(
          list_ids, list_dists, k, first, device_rows, data.dim, params.alpha,
          pruned_ids.data(), pruned_dists.data(), pruned_count.data());
      check_launch("prune_relaxed_kernel");
    });
    ctx.stream.synchronize();  // the batch buffers are refilled next
    control.add_done(count);
  }

  trace.mark(knn.on_device ? "stage 1" : "upload + stage 1");
  // Reverse edges as CSR: counts, offsets by a scan, fill, then each node's
  // segment sorted by (distance, id).
  DeviceBuffer<int> reverse_count(n);
  DeviceBuffer<int64_t> offsets(n + 1);
  TSDG_CUDA_CHECK(cudaMemsetAsync(reverse_count.data(), 0, reverse_count.bytes(), stream));
  count_reverse_kernel<<<blocks_for(n * k, 256), 256, 0, stream>>>(pruned_ids.data(), pruned_count.data(), n, k,
                                                                  reverse_count.data());
  check_launch("count_reverse_kernel");
  TSDG_CUDA_CHECK(cudaMemsetAsync(offsets.data(), 0, sizeof(int64_t), stream));
  size_t scan_bytes = 0;
  TSDG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, reverse_count.data(),
                                                offsets.data() + 1, n, stream));
  DeviceBuffer<unsigned char> scan_temp(scan_bytes);
  TSDG_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scan_temp.data(), scan_bytes, reverse_count.data(),
                                                offsets.data() + 1, n, stream));
  int64_t reverse_total = 0;
  copy_to_host(&reverse_total, offsets.data() + n, 1, stream);
  ctx.stream.synchronize();
  DeviceBuffer<uint64_t> reverse_keys(std::max<int64_t>(reverse_total, 1));
  DeviceBuffer<uint64_t> sorted_keys(std::max<int64_t>(reverse_total, 1));
  TSDG_CUDA_CHECK(cudaMemsetAsync(reverse_count.data(), 0, reverse_count.bytes(), stream));
  fill_reverse_kernel<<<blocks_for(n * k, 256), 256, 0, stream>>>(
      pruned_ids.data(), pruned_dists.data(), pruned_count.data(), n, k, offsets.data(),
      reverse_count.data(), reverse_keys.data());
  check_launch("fill_reverse_kernel");
  if (reverse_total > 0) {
    size_t sort_bytes = 0;
    TSDG_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(
        nullptr, sort_bytes, reverse_keys.data(), sorted_keys.data(), reverse_total, n,
        offsets.data(), offsets.data() + 1, stream));
    DeviceBuffer<unsigned char> sort_temp(sort_bytes);
    TSDG_CUDA_CHECK(cub::DeviceSegmentedSort::SortKeys(
        sort_temp.data(), sort_bytes, reverse_keys.data(), sorted_keys.data(), reverse_total, n,
        offsets.data(), offsets.data() + 1, stream));
  }
  reverse_keys.release();
  trace.mark("reverse edges (CSR, sorted)", reverse_total);

  DeviceBuffer<uint32_t> out_ids(static_cast<size_t>(scan_on_device ? n : batch) * degree);
  DeviceBuffer<uint8_t> out_lambdas(static_cast<size_t>(batch) * degree);
  if (before_stage_two) before_stage_two();
  if (relinked != nullptr) {
    // a merge's lists go out batch by batch, each counted as it is there
    control.set_total(n);
    control.set_phase(Phase::Link);
  }
  for (int64_t first = 0; first < n; first += batch) {
    control.throw_if_cancelled();
    const int64_t count = std::min(batch, n - first);
    uint32_t* batch_out_ids = out_ids.data() + (scan_on_device ? first * degree : 0);
    dispatch_metric(metric, [&](auto tag) {
      constexpr Metric M = decltype(tag)::value;
      occlusion_rank_kernel<M><<<static_cast<unsigned>(count), kThreads, 0, stream>>>(
          pruned_ids.data(), pruned_dists.data(), pruned_count.data(), k, offsets.data(),
          sorted_keys.data(), first, device_rows, data.dim, degree, params.lambda0,
          batch_out_ids, out_lambdas.data());
      check_launch("occlusion_rank_kernel");
    });
    copy_to_host(graph.list(first), batch_out_ids, static_cast<size_t>(count) * degree, stream);
    copy_to_host(graph.list_lambdas(first), out_lambdas.data(), static_cast<size_t>(count) * degree, stream);
    ctx.stream.synchronize();
    control.add_done(count);
    if (relinked != nullptr) control.wake_poll();
  }
  trace.mark("stage 2 + download");
  // The same bridges between components as the CPU path.
  if (scan_on_device) {
    DeviceGraphScan scan(stream, out_ids.data(), n, degree);
    const int64_t bridges = connect_components(data, graph, control, relinked, &scan);
    trace.mark("connect components (device scans)", bridges);
  } else {
    const int64_t bridges = connect_components(data, graph, control, relinked);
    trace.mark("connect components (host)", bridges);
  }
}

}  // namespace

TsdgGraph diversify(DeviceContext& ctx, MatrixView data, Metric metric, const KnnGraph& knn,
                    const DiversifyParams& params, const RunControl& control) {
  validate(data, knn, params);
  require_device_memory(static_cast<size_t>(data.rows) * data.dim * sizeof(float), "the rows to diversify");
  DeviceMatrix rows = DeviceMatrix::upload(data, ctx.stream.get());
  TsdgGraph graph(data.rows, params.degree);
  diversify_lists(ctx, data, rows.values.data(), metric, KnnLists{knn.ids.data(), knn.dists.data(), knn.k, false},
                  params, control, GraphSpan::of(graph), nullptr, {});
  return graph;
}

TsdgGraph diversify_resident(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                             const uint32_t* device_knn_ids, const float* device_knn_dists, int k,
                             const DiversifyParams& params, const RunControl& control) {
  TsdgGraph graph(data.rows, params.degree);
  diversify_resident_into(ctx, data, device_rows, metric, device_knn_ids, device_knn_dists, k, params, control,
                          GraphSpan::of(graph), nullptr);
  return graph;
}

void diversify_resident_into(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                             const uint32_t* device_knn_ids, const float* device_knn_dists, int k,
                             const DiversifyParams& params, const RunControl& control, GraphSpan graph,
                             uint8_t* relinked, const std::function<void()>& before_stage_two) {
  check_params(k, params);
  if (graph.nodes != data.rows || graph.degree != params.degree) {
    throw Error(Status::InvalidArgument, "diversify: the output lists do not match the rows and degree");
  }
  diversify_lists(ctx, data, device_rows, metric, KnnLists{device_knn_ids, device_knn_dists, k, true}, params,
                  control, graph, relinked, before_stage_two);
}

void diversify_host_lists_into(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                               const KnnGraph& knn, const DiversifyParams& params, const RunControl& control,
                               GraphSpan graph, uint8_t* relinked) {
  validate(data, knn, params);
  if (graph.nodes != data.rows || graph.degree != params.degree) {
    throw Error(Status::InvalidArgument, "diversify: the output lists do not match the rows and degree");
  }
  diversify_lists(ctx, data, device_rows, metric, KnnLists{knn.ids.data(), knn.dists.data(), knn.k, false}, params,
                  control, graph, relinked, {});
}

}  // namespace tsdg::cuda
