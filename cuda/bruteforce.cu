// Exact k-NN (papers 001, 002): for a tile of queries and a tile of base rows
// the product -2 Q B^T (or -Q B^T) comes from cuBLAS, the norms are added on
// the fly, and one warp per query row keeps its running top-k: a sorted list in
// shared memory, fed through a 32-entry queue of rows that beat the current
// k-th distance (FAISS's WarpSelect idea), so each distance is read once and
// only the few candidates that qualify are sorted.
#include <algorithm>
#include <limits>

#include "distance.cuh"
#include "gpu_algorithms.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

constexpr int kMaxSelectK = 2048;
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

// One warp per query row of the tile: merges the tile's columns into the
// row's running top-k (global, rows * k).
template <Metric M>
__global__ void select_tile_topk_kernel(const float* products, int rows, int cols,
                                        const float* query_norms, const float* base_norms,
                                        uint32_t base_offset, int k, bool first_tile,
                                        float* topk_dists, uint32_t* topk_ids) {
  extern __shared__ unsigned char shared_raw[];
  const int warp_in_block = threadIdx.x / kWarpSize;
  const int row = blockIdx.x * (blockDim.x / kWarpSize) + warp_in_block;
  if (row >= rows) return;
  const int lane = lane_id();
  const size_t per_warp = static_cast<size_t>(2 * k + kWarpSize) * (sizeof(float) + sizeof(uint32_t));
  unsigned char* base = shared_raw + per_warp * warp_in_block;
  WarpLists list{reinterpret_cast<float*>(base), nullptr};
  list.ids = reinterpret_cast<uint32_t*>(list.dists + k);
  WarpLists spare{reinterpret_cast<float*>(list.ids + k), nullptr};
  spare.ids = reinterpret_cast<uint32_t*>(spare.dists + k);
  float* queue_dists = reinterpret_cast<float*>(spare.ids + k);
  uint32_t* queue_ids = reinterpret_cast<uint32_t*>(queue_dists + kWarpSize);

  float* row_dists = topk_dists + static_cast<int64_t>(row) * k;
  uint32_t* row_ids = topk_ids + static_cast<int64_t>(row) * k;
  for (int i = lane; i < k; i += kWarpSize) {
    list.dists[i] = first_tile ? INFINITY : row_dists[i];
    list.ids[i] = first_tile ? kInvalidId : row_ids[i];
  }
  __syncwarp();

  const float query_norm = M == Metric::L2 ? query_norms[row] : 0.0f;
  const float* row_products = products + static_cast<int64_t>(row) * cols;
  float threshold = list.dists[k - 1];
  int queued = 0;
  for (int start = 0; start < cols; start += kWarpSize) {
    const int col = start + lane;
    float d = INFINITY;
    if (col < cols) {
      const float base_norm = M == Metric::L2 ? base_norms[col] : 0.0f;
      d = distance_from_product<M>(row_products[col], query_norm, base_norm);
    }
    unsigned passing = __ballot_sync(kFullMask, d < threshold);
    if (passing == 0) continue;
    if (queued + __popc(passing) > kWarpSize) {
      WarpLists current = flush_queue(list, spare, queue_dists, queue_ids, queued, k);
      spare = list;
      list = current;
      queued = 0;
      threshold = list.dists[k - 1];
      passing = __ballot_sync(kFullMask, d < threshold);
    }
    if (d < threshold) {
      const int slot = queued + __popc(passing & ((1u << lane) - 1u));
      queue_dists[slot] = d;
      queue_ids[slot] = base_offset + static_cast<uint32_t>(col);
    }
    queued += __popc(passing);
    __syncwarp();
  }
  if (queued > 0) list = flush_queue(list, spare, queue_dists, queue_ids, queued, k);
  for (int i = lane; i < k; i += kWarpSize) {
    row_dists[i] = list.dists[i];
    row_ids[i] = list.ids[i];
  }
}

}  // namespace

void compute_squared_norms(const float* rows, int64_t count, int dim, float* norms,
                           cudaStream_t stream) {
  if (count == 0) return;
  const int threads = 256;
  const int64_t blocks = (count * kWarpSize + threads - 1) / threads;
  squared_norms_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(rows, count, dim,
                                                                             norms);
  check_launch("squared_norms_kernel");
}

void exact_knn(DeviceContext& ctx, MatrixView base, MatrixView queries, Metric metric, int k,
               uint32_t* ids, float* dists, const RunControl& control,
               const ResidentRows* resident) {
  if (k <= 0 || k > kMaxSelectK) {
    throw Error(Status::InvalidArgument, "GPU exact k-NN supports 1 <= k <= 2048");
  }
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
  const size_t usable = usable_device_memory();
  const size_t base_bytes = static_cast<size_t>(base.rows) * dim * sizeof(float);
  const bool base_resident = resident != nullptr || base_bytes <= usable / 3;
  const int64_t base_tile = std::min<int64_t>(base.rows, 32768);
  const bool upload_base = base_resident && resident == nullptr;
  size_t budget = std::min<size_t>((upload_base ? usable - base_bytes : usable) / 3, size_t{2} << 30);
  int64_t query_tile = static_cast<int64_t>(budget / (static_cast<size_t>(base_tile) * sizeof(float)));
  const size_t per_query = static_cast<size_t>(dim) * sizeof(float) + 2 * k * sizeof(float);
  query_tile = std::min<int64_t>(query_tile, static_cast<int64_t>(budget / per_query));
  query_tile = std::min<int64_t>(query_count, std::max<int64_t>(query_tile, 256));

  DeviceBuffer<float> base_rows(resident ? 0 : static_cast<size_t>(base_resident ? base.rows : base_tile) * dim);
  DeviceBuffer<float> base_norms(resident ? 0 : (base_resident ? base.rows : base_tile));
  DeviceBuffer<float> query_rows(static_cast<size_t>(query_tile) * dim);
  DeviceBuffer<float> query_norms(query_tile);
  DeviceBuffer<float> products(static_cast<size_t>(query_tile) * base_tile);
  DeviceBuffer<float> topk_dists(static_cast<size_t>(query_tile) * k);
  DeviceBuffer<uint32_t> topk_ids(static_cast<size_t>(query_tile) * k);
  if (upload_base) {
    copy_to_device(base_rows.data(), base.data, base_rows.size(), stream);
    if (metric == Metric::L2) compute_squared_norms(base_rows.data(), base.rows, dim, base_norms.data(), stream);
  }
  const float* all_rows = resident ? resident->rows : base_rows.data();
  const float* all_norms = resident ? resident->norms : base_norms.data();

  const size_t per_warp = static_cast<size_t>(2 * k + kWarpSize) * (sizeof(float) + sizeof(uint32_t));
  const int warps_per_block =
      static_cast<int>(std::clamp<size_t>(kSelectSharedBudget / per_warp, 1, 8));
  const size_t shared_bytes = per_warp * warps_per_block;
  const float alpha = metric == Metric::L2 ? -2.0f : -1.0f;
  const float beta = 0.0f;

  for (int64_t q0 = 0; q0 < query_count; q0 += query_tile) {
    control.throw_if_cancelled();
    const int64_t q_rows = std::min(query_tile, query_count - q0);
    copy_to_device(query_rows.data(), queries.row(q0), static_cast<size_t>(q_rows) * dim, stream);
    if (metric == Metric::L2) compute_squared_norms(query_rows.data(), q_rows, dim, query_norms.data(), stream);
    for (int64_t b0 = 0; b0 < base.rows; b0 += base_tile) {
      const int64_t b_rows = std::min(base_tile, base.rows - b0);
      const float* tile_rows = all_rows + (base_resident ? b0 * dim : 0);
      const float* tile_norms = all_norms == nullptr ? nullptr : all_norms + (base_resident ? b0 : 0);
      if (!base_resident) {
        copy_to_device(base_rows.data(), base.row(b0), static_cast<size_t>(b_rows) * dim, stream);
        if (metric == Metric::L2) compute_squared_norms(base_rows.data(), b_rows, dim, base_norms.data(), stream);
      }
      // Column-major view: products^T (b_rows x q_rows) = B (d x b_rows)^T * Q (d x q_rows).
      TSDG_CUBLAS_CHECK(cublasSgemm(ctx.blas.get(), CUBLAS_OP_T, CUBLAS_OP_N,
                                    static_cast<int>(b_rows), static_cast<int>(q_rows), dim, &alpha,
                                    tile_rows, dim, query_rows.data(), dim, &beta, products.data(),
                                    static_cast<int>(b_rows)));
      const unsigned blocks = static_cast<unsigned>((q_rows + warps_per_block - 1) / warps_per_block);
      dispatch_metric(metric, [&](auto tag) {
        constexpr Metric M = decltype(tag)::value;
        auto kernel = select_tile_topk_kernel<M>;
        TSDG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(shared_bytes)));
        kernel<<<blocks, warps_per_block * kWarpSize, shared_bytes, stream>>>(
            products.data(), static_cast<int>(q_rows), static_cast<int>(b_rows),
            query_norms.data(), tile_norms, static_cast<uint32_t>(b0), k, b0 == 0,
            topk_dists.data(), topk_ids.data());
        check_launch("select_tile_topk_kernel");
      });
      if (!base_resident) ctx.stream.synchronize();  // the staging tile is reused
    }
    copy_to_host(ids + q0 * k, topk_ids.data(), static_cast<size_t>(q_rows) * k, stream);
    copy_to_host(dists + q0 * k, topk_dists.data(), static_cast<size_t>(q_rows) * k, stream);
    ctx.stream.synchronize();
    control.add_done(q_rows);
  }
}

}  // namespace tsdg::cuda
