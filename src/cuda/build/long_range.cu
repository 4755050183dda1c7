// The long-range candidates of long_range.h for a build whose rows and k-NN
// lists are on the device: the pivots' exact search and the widening of the
// lists run where the lists are, so that they stay on the device from GNND
// to both TSDG stages. The lists are those of with_long_range_candidates.

#include <algorithm>
#include <vector>

#include "distance.cuh"
#include "gpu_algorithms.h"
#include "long_range.h"
#include "device_phase_trace.h"
#include "random_candidate.h"

namespace tsdg::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

// The sources of a row's widened list, all on the device.
struct WidenInput {
  const uint32_t* knn_ids;  // nodes * knn_k, ascending, padded with kInvalidId
  const float* knn_dists;
  int knn_k;
  int knn_kept;               // entries of each k-NN list that stay
  const uint32_t* pivots;     // pivot index -> row id
  const uint32_t* near_ids;   // nodes * asked pivot indexes, ascending
  int asked;
  int random;
  uint64_t random_seed;
  const float* rows;
  int64_t nodes;
  int dim;
};

// One warp per row: the kept k-NN entries, then the nearest pivots and the
// random rows that are neither the row nor already listed, sorted by
// (distance, id) into a list of width entries, padded. Ids are unique in the
// list, so an entry's place is the count of entries before it.
template <Metric M>
__global__ void widen_lists_kernel(WidenInput in, int width, uint32_t* out_ids, float* out_dists) {
  __shared__ uint32_t ids[kWarpsPerBlock][kMaxDiversifyList];
  __shared__ float dists[kWarpsPerBlock][kMaxDiversifyList];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = lane_id();
  const int64_t u = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (u >= in.nodes) return;
  uint32_t* list_ids = ids[warp];
  float* list_dists = dists[warp];

  int count = 0;
  for (int j0 = 0; j0 < in.knn_kept; j0 += kWarpSize) {
    const int j = j0 + lane;
    const uint32_t id = j < in.knn_kept ? in.knn_ids[u * in.knn_k + j] : kInvalidId;
    const unsigned valid = __ballot_sync(kFullMask, id != kInvalidId);
    if (id != kInvalidId) {
      const int at = count + __popc(valid & ((1u << lane) - 1u));
      list_ids[at] = id;
      list_dists[at] = in.knn_dists[u * in.knn_k + j];
    }
    count += __popc(valid);
  }
  __syncwarp();
  const auto listed = [&](uint32_t id) {
    bool found = false;
    for (int j = lane; j < count; j += kWarpSize) found |= list_ids[j] == id;
    return __any_sync(kFullMask, found);
  };
  const auto append = [&](uint32_t id, float dist) {
    if (lane == 0) {
      list_ids[count] = id;
      list_dists[count] = dist;
    }
    __syncwarp();
    ++count;
  };
  for (int j = 0; j < in.asked; ++j) {
    const uint32_t p = in.near_ids[u * in.asked + j];
    if (p == kInvalidId) continue;
    const uint32_t id = in.pivots[p];
    if (id == u || listed(id)) continue;
    // exact, as the other candidates': the pivots were ranked by TF32 products
    append(id, warp_distance<M>(in.rows + u * in.dim, in.rows + static_cast<int64_t>(id) * in.dim, in.dim));
  }
  for (int j = 0; j < in.random; ++j) {
    const uint32_t id = random_candidate(in.random_seed, u, j, in.nodes);
    if (id == u || listed(id)) continue;
    append(id, warp_distance<M>(in.rows + u * in.dim, in.rows + static_cast<int64_t>(id) * in.dim, in.dim));
  }

  uint32_t* row_ids = out_ids + u * width;
  float* row_dists = out_dists + u * width;
  for (int e = lane; e < count; e += kWarpSize) {
    const float d = list_dists[e];
    const uint32_t id = list_ids[e];
    int place = 0;
    for (int f = 0; f < count; ++f) {
      place += list_dists[f] < d || (list_dists[f] == d && list_ids[f] < id);
    }
    row_ids[place] = id;
    row_dists[place] = d;
  }
  for (int e = count + lane; e < width; e += kWarpSize) {
    row_ids[e] = kInvalidId;
    row_dists[e] = __int_as_float(0x7f800000);  // +inf
  }
}

}  // namespace

DeviceKnnLists with_long_range_candidates_on_device(DeviceContext& ctx, const float* device_rows, int64_t nodes,
                                                    int dim, Metric metric, const uint32_t* knn_ids,
                                                    const float* knn_dists, int knn_k,
                                                    const DiversifyParams& params, const RunControl& control) {
  cudaStream_t stream = ctx.stream.get();
  PhaseTrace trace("long-range candidates", stream);
  const int64_t stride = long_range_pivot_stride(nodes, params);
  const std::vector<uint32_t> pivot_ids = stride > 0 ? pivot_rows(nodes, stride) : std::vector<uint32_t>{};
  const auto pivot_count = static_cast<int64_t>(pivot_ids.size());
  const int asked = pivot_count > 0 ? pivots_asked(params, pivot_count) : 0;
  const int random = random_candidate_count(params, nodes);
  const int width = long_range_list_width(knn_k, asked + random, kMaxDiversifyList);

  DeviceBuffer<uint32_t> pivots(pivot_ids.size());
  DeviceBuffer<uint32_t> near_ids(static_cast<size_t>(nodes) * asked);
  DeviceBuffer<float> near_dists(near_ids.size());
  if (asked > 0) {
    DeviceBuffer<float> pivot_rows_on_device(static_cast<size_t>(pivot_count) * dim);
    DeviceBuffer<float> pivot_norms(metric == Metric::L2 ? pivot_ids.size() : 0);
    copy_to_device(pivots.data(), pivot_ids.data(), pivot_ids.size(), stream);
    gather_rows(device_rows, dim, pivots.data(), pivot_count, pivot_rows_on_device.data(), stream);
    if (metric == Metric::L2) compute_squared_norms(pivot_rows_on_device.data(), pivot_count, dim, pivot_norms.data(), stream);
    ExactKnnScratch scratch;
    // Which pivots are nearest only picks candidates: a near tie ranked the
    // other way by TF32 products changes little, and their products run
    // several times faster on tensor cores.
    const Tf32Products tf32(ctx.blas);
    exact_knn_on_device(ctx, ResidentRows{pivot_rows_on_device.data(), pivot_norms.data()}, pivot_count, dim,
                        device_rows, nodes, metric, asked, near_ids.data(), near_dists.data(), scratch);
    ctx.stream.synchronize();
    trace.mark("nearest pivots", pivot_count);
  }
  control.throw_if_cancelled();

  DeviceKnnLists out;
  out.k = width;
  out.ids.allocate(static_cast<size_t>(nodes) * width);
  out.dists.allocate(static_cast<size_t>(nodes) * width);
  const WidenInput in{knn_ids, knn_dists, knn_k,  width - asked - random, pivots.data(), near_ids.data(),
                      asked,   random,    params.random_seed, device_rows,            nodes,         dim};
  const auto blocks = static_cast<unsigned>((nodes + kWarpsPerBlock - 1) / kWarpsPerBlock);
  dispatch_metric(metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    widen_lists_kernel<M><<<blocks, kWarpsPerBlock * kWarpSize, 0, stream>>>(in, width, out.ids.data(),
                                                                           out.dists.data());
    check_launch("widen_lists_kernel");
  });
  trace.mark("widen lists", width);
  return out;
}

TsdgGraph diversify_resident_with_long_range(DeviceContext& ctx, MatrixView data, const float* device_rows,
                                             Metric metric, DeviceKnnLists knn, const DiversifyParams& params,
                                             const RunControl& control) {
  const DeviceKnnLists widened = with_long_range_candidates_on_device(
      ctx, device_rows, data.rows, data.dim, metric, knn.ids.data(), knn.dists.data(), knn.k, params, control);
  knn.ids.release();
  knn.dists.release();
  DiversifyParams candidates_added = params;
  candidates_added.pivot_candidates = 0;
  candidates_added.random_candidates = 0;
  return diversify_resident(ctx, data, device_rows, metric, widened.ids.data(), widened.dists.data(), widened.k,
                            candidates_added, control);
}

TsdgGraph diversify_with_long_range(DeviceContext& ctx, MatrixView data, Metric metric, const KnnGraph& knn,
                                    const DiversifyParams& params, const RunControl& control) {
  if (knn.nodes != data.rows) throw Error(Status::InvalidArgument, "diversify: graph and data sizes differ");
  cudaStream_t stream = ctx.stream.get();
  const DeviceMatrix rows = DeviceMatrix::upload(data, stream);
  DeviceKnnLists lists;
  lists.k = knn.k;
  lists.ids.allocate(knn.ids.size());
  lists.dists.allocate(knn.dists.size());
  copy_to_device(lists.ids.data(), knn.ids.data(), knn.ids.size(), stream);
  copy_to_device(lists.dists.data(), knn.dists.data(), knn.dists.size(), stream);
  return diversify_resident_with_long_range(ctx, data, rows.values.data(), metric, std::move(lists), params,
                                            control);
}

}  // namespace tsdg::cuda
