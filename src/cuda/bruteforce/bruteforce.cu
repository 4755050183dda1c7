// Exact k-NN (Garcia et al., 2010): for a tile of queries and a tile of base rows
// the product -2 Q B^T (or -Q B^T) comes from cuBLAS, the norms are added on
// the fly, and one warp per query row keeps its running top-k: a sorted list in
// shared memory, fed through a 32-entry queue of rows that beat the current
// k-th distance (FAISS's WarpSelect idea), so each distance is read once and
// only the few candidates that qualify are sorted.
#include <algorithm>
#include <limits>
#include <string>

#include "distance.cuh"
#include "gpu_algorithms.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

constexpr int kSelectSharedBudget = 40 * 1024;

__global__ void squared_norms_kernel(const float* rows, int64_t count, int dim, float* norms) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (warp >= count) return;
  const float* row = rows + warp * dim;
  float sum = 0.0f;
  for (int i = lane_id(); i < dim; i += kWarpSize) sum += row[i] * row[i];
  sum = warp_sum(sum);
  if (lane_id() == 0) norms[warp] = sum;
}

__global__ void gather_rows_kernel(const float* rows, int dim, const uint32_t* picked, int64_t count,
                                   float* out) {
  const int64_t at = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (at >= count * dim) return;
  out[at] = rows[static_cast<int64_t>(picked[at / dim]) * dim + at % dim];
}

// The distance of product entry (query, base) for metric M.
template <Metric M>
__device__ __forceinline__ float distance_from_product(float product, float query_norm,
                                                       float base_norm) {
  if constexpr (M == Metric::L2) {
    return fmaxf(query_norm + base_norm + product, 0.0f);  // product holds -2 q.b
  } else if constexpr (M == Metric::InnerProduct) {
    return product;  // product holds -q.b
  } else {
    return 1.0f + product;
  }
}

struct WarpLists {
  float* dists;
  uint32_t* ids;
};

// Sorts the queue and merges it into the list; returns the list now current.
__device__ __forceinline__ WarpLists flush_queue(WarpLists list, WarpLists spare, float* queue_dists,
                                                 uint32_t* queue_ids, int queued, int k) {
  const int lane = lane_id();
  float d = lane < queued ? queue_dists[lane] : INFINITY;
  uint32_t id = lane < queued ? queue_ids[lane] : kInvalidId;
  warp_bitonic_sort(d, id);
  queue_dists[lane] = d;
  queue_ids[lane] = id;
  __syncwarp();
  warp_merge_sorted(list.dists, list.ids, k, queue_dists, queue_ids, queued, spare.dists,
                    spare.ids);
  return spare;
}

// A warp's running top-k in shared memory (list, spare list, 32-entry queue)
// and the candidates it is being offered.
struct WarpTopK {
  WarpLists list;
  WarpLists spare;
  float* queue_dists;
  uint32_t* queue_ids;
};

__device__ __forceinline__ WarpTopK warp_topk_in(unsigned char* shared, int k) {
  WarpTopK t;
  t.list = {reinterpret_cast<float*>(shared), nullptr};
  t.list.ids = reinterpret_cast<uint32_t*>(t.list.dists + k);
  t.spare = {reinterpret_cast<float*>(t.list.ids + k), nullptr};
  t.spare.ids = reinterpret_cast<uint32_t*>(t.spare.dists + k);
  t.queue_dists = reinterpret_cast<float*>(t.spare.ids + k);
  t.queue_ids = reinterpret_cast<uint32_t*>(t.queue_dists + kWarpSize);
  return t;
}

// How many 32-candidate steps ahead a warp loads: one warp scanning a row
// alone waits a memory latency per step unless its loads are in flight
// before it needs them.
constexpr int kLoadsAhead = 8;

// Offers count candidates to the warp's list, which starts from init (or
// empty when init_dists is null) and ends in out; candidate(i, d, id) gives
// candidate i < count.
template <typename Candidate>
__device__ __forceinline__ void warp_topk_scan(WarpTopK t, int k, const float* init_dists,
                                               const uint32_t* init_ids, int count,
                                               Candidate candidate, float* out_dists,
                                               uint32_t* out_ids) {
  const int lane = lane_id();
  for (int i = lane; i < k; i += kWarpSize) {
    t.list.dists[i] = init_dists == nullptr ? INFINITY : init_dists[i];
    t.list.ids[i] = init_dists == nullptr ? kInvalidId : init_ids[i];
  }
  __syncwarp();

  float ahead_dists[kLoadsAhead];
  uint32_t ahead_ids[kLoadsAhead];
#pragma unroll
  for (int j = 0; j < kLoadsAhead; ++j) {
    ahead_dists[j] = INFINITY;
    ahead_ids[j] = kInvalidId;
    if (j * kWarpSize + lane < count) candidate(j * kWarpSize + lane, ahead_dists[j], ahead_ids[j]);
  }
  float threshold = t.list.dists[k - 1];
  int queued = 0;
  for (int start = 0; start < count; start += kWarpSize) {
    const float d = ahead_dists[0];
    const uint32_t id = ahead_ids[0];
#pragma unroll
    for (int j = 0; j + 1 < kLoadsAhead; ++j) {
      ahead_dists[j] = ahead_dists[j + 1];
      ahead_ids[j] = ahead_ids[j + 1];
    }
    const int next = start + kLoadsAhead * kWarpSize + lane;
    ahead_dists[kLoadsAhead - 1] = INFINITY;
    ahead_ids[kLoadsAhead - 1] = kInvalidId;
    if (next < count) candidate(next, ahead_dists[kLoadsAhead - 1], ahead_ids[kLoadsAhead - 1]);

    unsigned passing = __ballot_sync(kFullMask, d < threshold);
    if (passing == 0) continue;
    if (queued + __popc(passing) > kWarpSize) {
      WarpLists current = flush_queue(t.list, t.spare, t.queue_dists, t.queue_ids, queued, k);
      t.spare = t.list;
      t.list = current;
      queued = 0;
      threshold = t.list.dists[k - 1];
      passing = __ballot_sync(kFullMask, d < threshold);
    }
    if (d < threshold) {
      const int slot = queued + __popc(passing & ((1u << lane) - 1u));
      t.queue_dists[slot] = d;
      t.queue_ids[slot] = id;
    }
    queued += __popc(passing);
    __syncwarp();
  }
  if (queued > 0) t.list = flush_queue(t.list, t.spare, t.queue_dists, t.queue_ids, queued, k);
  for (int i = lane; i < k; i += kWarpSize) {
    out_dists[i] = t.list.dists[i];
    out_ids[i] = t.list.ids[i];
  }
}

__device__ __forceinline__ unsigned char* warp_shared(unsigned char* shared_raw, int k) {
  const size_t per_warp = static_cast<size_t>(2 * k + kWarpSize) * (sizeof(float) + sizeof(uint32_t));
  return shared_raw + per_warp * (threadIdx.x / kWarpSize);
}

// One warp per (query row, segment) of the tile: a row's columns are split
// into segments of segment_cols so that a few queries still keep the device
// busy. With one segment a row's top-k is merged into its running list
// (out, rows * k); with more, each segment's own top-k goes to out
// ((rows * segments) * k) for merge_segment_topk_kernel.
template <Metric M>
__global__ void select_tile_topk_kernel(const float* products, int rows, int cols, int segments,
                                        int segment_cols, const float* query_norms,
                                        const float* base_norms, uint32_t base_offset, int k,
                                        bool first_tile, float* out_dists, uint32_t* out_ids) {
  extern __shared__ unsigned char shared_raw[];
  const int warp = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (warp >= rows * segments) return;
  const int row = warp / segments;
  const int first_col = (warp % segments) * segment_cols;
  const int count = min(segment_cols, cols - first_col);
  const float query_norm = M == Metric::L2 ? query_norms[row] : 0.0f;
  const float* row_products = products + static_cast<int64_t>(row) * cols + first_col;
  float* warp_dists = out_dists + static_cast<int64_t>(warp) * k;
  uint32_t* warp_ids = out_ids + static_cast<int64_t>(warp) * k;
  const bool from_list = segments == 1 && !first_tile;
  warp_topk_scan(
      warp_topk_in(warp_shared(shared_raw, k), k), k, from_list ? warp_dists : nullptr, warp_ids,
      count,
      [&](int i, float& d, uint32_t& id) {
        const float base_norm = M == Metric::L2 ? base_norms[first_col + i] : 0.0f;
        d = distance_from_product<M>(row_products[i], query_norm, base_norm);
        id = base_offset + static_cast<uint32_t>(first_col + i);
      },
      warp_dists, warp_ids);
}

// One warp per query row: the segments' top-k lists of the tile merged into
// the row's running list (rows * k).
__global__ void merge_segment_topk_kernel(const float* segment_dists, const uint32_t* segment_ids,
                                          int rows, int segments, int k, bool first_tile,
                                          float* topk_dists, uint32_t* topk_ids) {
  extern __shared__ unsigned char shared_raw[];
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + threadIdx.x / kWarpSize;
  if (row >= rows) return;
  const float* row_dists = segment_dists + static_cast<int64_t>(row) * segments * k;
  const uint32_t* row_ids = segment_ids + static_cast<int64_t>(row) * segments * k;
  float* list_dists = topk_dists + static_cast<int64_t>(row) * k;
  uint32_t* list_ids = topk_ids + static_cast<int64_t>(row) * k;
  warp_topk_scan(
      warp_topk_in(warp_shared(shared_raw, k), k), k, first_tile ? nullptr : list_dists, list_ids,
      segments * k,
      [&](int i, float& d, uint32_t& id) {
        d = row_dists[i];
        id = row_ids[i];
      },
      list_dists, list_ids);
}

}  // namespace

void gather_rows(const float* rows, int dim, const uint32_t* picked, int64_t count, float* out,
                 cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  const int64_t values = count * dim;
  gather_rows_kernel<<<static_cast<unsigned>((values + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      rows, dim, picked, count, out);
  check_launch("gather_rows_kernel");
}

void compute_squared_norms(const float* rows, int64_t count, int dim, float* norms,
                           cudaStream_t stream) {
  if (count == 0) return;
  const int threads = 256;
  const int64_t blocks = (count * kWarpSize + threads - 1) / threads;
  squared_norms_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(rows, count, dim,
                                                                             norms);
  check_launch("squared_norms_kernel");
}

namespace {

// The query tile of a search on resident rows with scratch: its products
// (query tile x base tile floats) stay within this, without asking the device.
constexpr size_t kScratchProductBytes = size_t{256} << 20;

// Fewer queries than fill the device have their columns split into segments
// (select_tile_topk_kernel) for about this many warps in all; a segment keeps
// at least kMinSegmentCols columns and 8 k, so that its own top-k is a small
// part of what it reads.
constexpr int64_t kSelectWarpsWanted = 4096;
constexpr int64_t kMinSegmentCols = 1024;

int segments_for(int64_t rows, int64_t cols, int k) {
  const int64_t most = std::max<int64_t>(1, cols / std::max<int64_t>(kMinSegmentCols, 8 * k));
  return static_cast<int>(std::clamp<int64_t>((kSelectWarpsWanted + rows - 1) / rows, 1, most));
}

template <typename T>
T* scratch_buffer(DeviceBuffer<T>& buffer, size_t count) {
  if (buffer.size() < count) buffer.allocate(count);
  return buffer.data();
}

// The launch shape and buffers of the top-k selection over base tiles.
struct TileSelect {
  int64_t base_tile;
  float* products;             // query tile x base tile
  int most_segments;
  float* segment_dists;        // null with one segment
  uint32_t* segment_ids;
  int warps_per_block;
  size_t shared_bytes;
};

TileSelect tile_select(Metric metric, int k, int64_t base_tile, int64_t query_tile, int64_t query_count,
                       ExactKnnScratch& buffers) {
  TileSelect plan{};
  plan.base_tile = base_tile;
  plan.products = scratch_buffer(buffers.products, static_cast<size_t>(query_tile) * base_tile);
  plan.most_segments = segments_for(std::min(query_tile, query_count), base_tile, k);
  if (plan.most_segments > 1) {
    const size_t lists = static_cast<size_t>(std::min(query_tile, query_count)) * plan.most_segments * k;
    plan.segment_dists = scratch_buffer(buffers.segment_dists, lists);
    plan.segment_ids = scratch_buffer(buffers.segment_ids, lists);
  }
  const size_t per_warp = static_cast<size_t>(2 * k + kWarpSize) * (sizeof(float) + sizeof(uint32_t));
  plan.warps_per_block = static_cast<int>(std::clamp<size_t>(kSelectSharedBudget / per_warp, 1, 8));
  plan.shared_bytes = per_warp * plan.warps_per_block;
  dispatch_metric(metric, [&](auto tag) {
    TSDG_CUDA_CHECK(cudaFuncSetAttribute(select_tile_topk_kernel<decltype(tag)::value>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(plan.shared_bytes)));
  });
  TSDG_CUDA_CHECK(cudaFuncSetAttribute(merge_segment_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(plan.shared_bytes)));
  return plan;
}

// The top-k of q_rows queries on the device (with their squared norms for
// L2) among base_rows rows, into topk_dists / topk_ids (device, q_rows * k);
// base_tile_at(b0, b_rows) returns the ResidentRows of the tile's rows on
// the device.
template <typename BaseTileAt>
void select_topk_over_base(DeviceContext& ctx, const TileSelect& plan, Metric metric, int k, int dim,
                           int64_t base_rows, const float* query_rows, const float* query_norms, int64_t q_rows,
                           float* topk_dists, uint32_t* topk_ids, BaseTileAt&& base_tile_at) {
  cudaStream_t stream = ctx.stream.get();
  const float alpha = metric == Metric::L2 ? -2.0f : -1.0f;
  const float beta = 0.0f;
  for (int64_t b0 = 0; b0 < base_rows; b0 += plan.base_tile) {
    const int64_t b_rows = std::min(plan.base_tile, base_rows - b0);
    const ResidentRows tile = base_tile_at(b0, b_rows);
    // Column-major view: products^T (b_rows x q_rows) = B (d x b_rows)^T * Q (d x q_rows).
    TSDG_CUBLAS_CHECK(cublasSgemm(ctx.blas.get(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(b_rows),
                                  static_cast<int>(q_rows), dim, &alpha, tile.rows, dim, query_rows, dim, &beta,
                                  plan.products, static_cast<int>(b_rows)));
    const int segments = std::min(plan.most_segments, segments_for(q_rows, b_rows, k));
    const int segment_cols = static_cast<int>((b_rows + segments - 1) / segments);
    const int64_t warps = q_rows * segments;
    const unsigned blocks = static_cast<unsigned>((warps + plan.warps_per_block - 1) / plan.warps_per_block);
    dispatch_metric(metric, [&](auto tag) {
      constexpr Metric M = decltype(tag)::value;
      select_tile_topk_kernel<M><<<blocks, plan.warps_per_block * kWarpSize, plan.shared_bytes, stream>>>(
          plan.products, static_cast<int>(q_rows), static_cast<int>(b_rows), segments, segment_cols, query_norms,
          tile.norms, static_cast<uint32_t>(b0), k, b0 == 0, segments > 1 ? plan.segment_dists : topk_dists,
          segments > 1 ? plan.segment_ids : topk_ids);
      check_launch("select_tile_topk_kernel");
    });
    if (segments > 1) {
      const unsigned merge_blocks =
          static_cast<unsigned>((q_rows + plan.warps_per_block - 1) / plan.warps_per_block);
      merge_segment_topk_kernel<<<merge_blocks, plan.warps_per_block * kWarpSize, plan.shared_bytes, stream>>>(
          plan.segment_dists, plan.segment_ids, static_cast<int>(q_rows), segments, k, b0 == 0, topk_dists,
          topk_ids);
      check_launch("merge_segment_topk_kernel");
    }
  }
}

void check_select_k(int k) {
  if (k <= 0 || k > kMaxExactKnnK) {
    throw Error(Status::InvalidArgument, "GPU exact k-NN supports 1 <= k <= " + std::to_string(kMaxExactKnnK));
  }
}

}  // namespace

void exact_knn(DeviceContext& ctx, MatrixView base, MatrixView queries, Metric metric, int k,
               uint32_t* ids, float* dists, const RunControl& control,
               const ResidentRows* resident, ExactKnnScratch* scratch) {
  check_select_k(k);
  require_device_metric(metric);
  if (base.dim != queries.dim) throw Error(Status::InvalidArgument, "dimension mismatch");
  if (base.rows >= static_cast<int64_t>(kInvalidId)) {
    throw Error(Status::InvalidArgument, "too many base rows for 32-bit ids");
  }
  const int64_t query_count = queries.rows;
  if (query_count == 0) return;
  const int dim = base.dim;
  cudaStream_t stream = ctx.stream.get();
  if (base.rows == 0) {
    std::fill(ids, ids + query_count * k, kInvalidId);
    std::fill(dists, dists + query_count * k, std::numeric_limits<float>::infinity());
    return;
  }

  // Tile sizes from the free memory: the product tile dominates.
  const int64_t base_tile = std::min<int64_t>(base.rows, 32768);
  const bool scratch_tiles = resident != nullptr && scratch != nullptr;
  const size_t usable = scratch_tiles ? 0 : usable_device_memory();
  const size_t base_bytes = static_cast<size_t>(base.rows) * dim * sizeof(float);
  const bool base_resident = resident != nullptr || base_bytes <= usable / 3;
  const bool upload_base = base_resident && resident == nullptr;
  size_t budget = scratch_tiles ? kScratchProductBytes
                                : std::min<size_t>((upload_base ? usable - base_bytes : usable) / 3,
                                                   size_t{2} << 30);
  int64_t query_tile = static_cast<int64_t>(budget / (static_cast<size_t>(base_tile) * sizeof(float)));
  const size_t per_query = static_cast<size_t>(dim) * sizeof(float) + 2 * k * sizeof(float);
  query_tile = std::min<int64_t>(query_tile, static_cast<int64_t>(budget / per_query));
  query_tile = std::min<int64_t>(query_count, std::max<int64_t>(query_tile, 256));

  DeviceBuffer<float> base_rows(resident ? 0 : static_cast<size_t>(base_resident ? base.rows : base_tile) * dim);
  DeviceBuffer<float> base_norms(resident ? 0 : (base_resident ? base.rows : base_tile));
  ExactKnnScratch own;
  ExactKnnScratch& buffers = scratch_tiles ? *scratch : own;
  float* query_rows = scratch_buffer(buffers.query_rows, static_cast<size_t>(query_tile) * dim);
  float* query_norms = scratch_buffer(buffers.query_norms, query_tile);
  float* topk_dists = scratch_buffer(buffers.topk_dists, static_cast<size_t>(query_tile) * k);
  uint32_t* topk_ids = scratch_buffer(buffers.topk_ids, static_cast<size_t>(query_tile) * k);
  const TileSelect plan = tile_select(metric, k, base_tile, query_tile, query_count, buffers);
  if (upload_base) {
    copy_to_device(base_rows.data(), base.data, base_rows.size(), stream);
    if (metric == Metric::L2) compute_squared_norms(base_rows.data(), base.rows, dim, base_norms.data(), stream);
  }
  const float* all_rows = resident ? resident->rows : base_rows.data();
  const float* all_norms = resident ? resident->norms : base_norms.data();

  for (int64_t q0 = 0; q0 < query_count; q0 += query_tile) {
    control.throw_if_cancelled();
    const int64_t q_rows = std::min(query_tile, query_count - q0);
    copy_to_device(query_rows, queries.row(q0), static_cast<size_t>(q_rows) * dim, stream);
    if (metric == Metric::L2) compute_squared_norms(query_rows, q_rows, dim, query_norms, stream);
    select_topk_over_base(ctx, plan, metric, k, dim, base.rows, query_rows, query_norms, q_rows, topk_dists,
                          topk_ids, [&](int64_t b0, int64_t b_rows) {
                            if (base_resident) {
                              return ResidentRows{all_rows + b0 * dim,
                                                  all_norms == nullptr ? nullptr : all_norms + b0};
                            }
                            ctx.stream.synchronize();  // the staging tile is reused
                            copy_to_device(base_rows.data(), base.row(b0), static_cast<size_t>(b_rows) * dim,
                                           stream);
                            if (metric == Metric::L2) {
                              compute_squared_norms(base_rows.data(), b_rows, dim, base_norms.data(), stream);
                            }
                            return ResidentRows{base_rows.data(), base_norms.data()};
                          });
    copy_to_host(ids + q0 * k, topk_ids, static_cast<size_t>(q_rows) * k, stream);
    copy_to_host(dists + q0 * k, topk_dists, static_cast<size_t>(q_rows) * k, stream);
    ctx.stream.synchronize();
    control.add_done(q_rows);
  }
}

void exact_knn_on_device(DeviceContext& ctx, const ResidentRows& base, int64_t base_rows, int dim,
                         const float* queries, int64_t query_count, Metric metric, int k, uint32_t* ids,
                         float* dists, ExactKnnScratch& scratch) {
  check_select_k(k);
  require_device_metric(metric);
  if (query_count == 0 || base_rows == 0) return;
  const int64_t base_tile = std::min<int64_t>(base_rows, 32768);
  const int64_t query_tile = std::min<int64_t>(
      query_count, std::max<int64_t>(256, static_cast<int64_t>(kScratchProductBytes / (base_tile * sizeof(float)))));
  float* query_norms = scratch_buffer(scratch.query_norms, query_tile);
  const TileSelect plan = tile_select(metric, k, base_tile, query_tile, query_count, scratch);
  for (int64_t q0 = 0; q0 < query_count; q0 += query_tile) {
    const int64_t q_rows = std::min(query_tile, query_count - q0);
    const float* query_rows = queries + q0 * dim;
    if (metric == Metric::L2) compute_squared_norms(query_rows, q_rows, dim, query_norms, ctx.stream.get());
    select_topk_over_base(ctx, plan, metric, k, dim, base_rows, query_rows, query_norms, q_rows, dists + q0 * k,
                          ids + q0 * k, [&](int64_t b0, int64_t) {
                            return ResidentRows{base.rows + b0 * dim, base.norms == nullptr ? nullptr : base.norms + b0};
                          });
  }
}

}  // namespace tsdg::cuda
