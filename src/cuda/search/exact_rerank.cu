// The walks' best candidates scored again on the float rows: each query's
// walk_k candidates (the walk ranked them by half-precision distances) are
// sorted by their exact distances and the k best returned, so that results
// and their distances are those of the float rows.
#include <algorithm>

#include "device_memory.h"
#include "search_kernels.h"

namespace tsdg::cuda {
namespace {

constexpr int kTeam = 8;
constexpr int kTeamsPerWarp = kWarpSize / kTeam;

size_t rerank_shared_bytes(int dim, int walk_k) {
  return static_cast<size_t>((dim + 3) & ~3) * 4 + static_cast<size_t>(walk_k) * 16 + kWarpSize * 8;
}

template <Metric M>
__global__ void __launch_bounds__(kWarpSize) exact_rerank_kernel(RerankLaunch launch) {
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const int64_t query_index = blockIdx.x;
  const int lane = lane_id();
  const int dim = launch.dim;
  const int walk_k = launch.walk_k;
  float* query = reinterpret_cast<float*>(shared_raw);
  float* best_dists = query + ((dim + 3) & ~3);
  uint32_t* best_ids = reinterpret_cast<uint32_t*>(best_dists + walk_k);
  float* spare_dists = reinterpret_cast<float*>(best_ids + walk_k);
  uint32_t* spare_ids = reinterpret_cast<uint32_t*>(spare_dists + walk_k);
  float* cand_dists = reinterpret_cast<float*>(spare_ids + walk_k);
  uint32_t* cand_ids = reinterpret_cast<uint32_t*>(cand_dists + kWarpSize);

  load_query(launch.queries + query_index * dim, dim, (dim + 3) & ~3, query);
  for (int i = lane; i < walk_k; i += kWarpSize) {
    best_dists[i] = INFINITY;
    best_ids[i] = kInvalidId;
  }
  __syncwarp();
  const uint32_t* walked = launch.walk_ids + query_index * walk_k;
  for (int first = 0; first < walk_k; first += kWarpSize) {
    const uint32_t id = first + lane < walk_k ? walked[first + lane] : kInvalidId;
    const unsigned valid = __ballot_sync(kFullMask, id != kInvalidId);
    if (valid == 0) break;  // the walk's list ends with its invalid entries
    if (id != kInvalidId) cand_ids[__popc(valid & ((1u << lane) - 1u))] = id;
    __syncwarp();
    const int count = __popc(valid);
    const int team = lane / kTeam;
    for (int at = 0; at < count; at += kTeamsPerWarp) {
      const int index = at + team;
      const float* row = index < count ? launch.rows + static_cast<int64_t>(cand_ids[index]) * dim : nullptr;
      const float d = team_distance<M, kTeam>(query, row, dim);
      if (index < count && lane % kTeam == 0) cand_dists[index] = d;
    }
    __syncwarp();
    merge_into_best(best_dists, best_ids, spare_dists, spare_ids, walk_k, cand_dists, cand_ids, count);
  }
  const int k = launch.k;
  for (int i = lane; i < k; i += kWarpSize) {
    launch.ids[query_index * k + i] = best_ids[i];
    launch.dists[query_index * k + i] = best_dists[i];
  }
}

}  // namespace

int rerank_candidate_count(int k, int ef) {
  return std::min(ef, (2 * k + kWarpSize - 1) / kWarpSize * kWarpSize);
}

void launch_exact_rerank(const RerankLaunch& launch, Metric metric, cudaStream_t stream) {
  if (launch.query_count == 0) return;
  if (launch.k > launch.walk_k) throw Error(Status::InvalidArgument, "the rerank needs k <= its candidates");
  const size_t shared_bytes = rerank_shared_bytes(launch.dim, launch.walk_k);
  dispatch_metric(metric, [&](auto tag) {
    constexpr Metric M = decltype(tag)::value;
    auto kernel = exact_rerank_kernel<M>;
    TSDG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
    kernel<<<static_cast<unsigned>(launch.query_count), kWarpSize, shared_bytes, stream>>>(launch);
    check_launch("exact_rerank_kernel");
  });
}

}  // namespace tsdg::cuda
