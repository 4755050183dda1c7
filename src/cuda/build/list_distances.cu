// The distances of k-NN lists given as ids alone: a merge's old lists come
// from the index, which keeps no distances. One warp per list, one warp
// distance per listed row, so a list's reads of its own row stay in cache.
#include "distance.cuh"
#include "gnnd_workspace.h"
#include "gpu_algorithms.h"
#include "warp_primitives.cuh"

namespace tsdg::cuda {
namespace {

template <Metric M>
__global__ void list_distances_kernel(const float* rows, int dim, const uint32_t* ids, int64_t lists,
                                      int k, float* dists) {
  const int64_t u = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize;
  if (u >= lists) return;
  const float* row = rows + u * dim;
  for (int j = 0; j < k; ++j) {
    const uint32_t v = ids[u * k + j];
    const float d = v == kInvalidId ? INFINITY : warp_distance<M>(row, rows + static_cast<int64_t>(v) * dim, dim);
    if (lane_id() == 0) dists[u * k + j] = d;
  }
}

}  // namespace

void list_distances_resident(const float* rows, int dim, Metric metric, const uint32_t* ids,
                             int64_t lists, int k, float* dists, cudaStream_t stream) {
  if (lists == 0) return;
  dispatch_metric(metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    list_distances_kernel<M><<<static_cast<unsigned>((lists * kWarpSize + 255) / 256), 256, 0, stream>>>(
        rows, dim, ids, lists, k, dists);
    check_launch("list_distances_kernel");
  });
}

void list_distances(DeviceContext& ctx, MatrixView data, Metric metric, const uint32_t* ids, int k,
                    float* dists, const RunControl& control) {
  const int64_t lists = data.rows;
  if (lists == 0) return;
  const size_t entries = static_cast<size_t>(lists) * k;
  require_device_memory(static_cast<size_t>(lists) * data.dim * sizeof(float) + entries * 8,
                        "the distances of the k-NN lists");
  control.throw_if_cancelled();
  cudaStream_t stream = ctx.stream.get();
  const DeviceMatrix rows = DeviceMatrix::upload(data, stream);
  DeviceBuffer<uint32_t> device_ids(entries);
  DeviceBuffer<float> device_dists(entries);
  copy_to_device(device_ids.data(), ids, entries, stream);
  list_distances_resident(rows.values.data(), data.dim, metric, device_ids.data(), lists, k,
                          device_dists.data(), stream);
  copy_to_host(dists, device_dists.data(), entries, stream);
  ctx.stream.synchronize();
}

}  // namespace tsdg::cuda
