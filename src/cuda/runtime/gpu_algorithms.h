// Host entry points of the GPU algorithms, one .cu file each. They take host
// arrays, move what they need to the device on ctx's stream and return host
// results; the backend (cuda_backend.cpp) only forwards to them.
#pragma once

#include <cstdint>
#include <functional>

#include "device_memory.h"
#include "merge.h"
#include "params.h"
#include "run_control.h"
#include "types.h"

namespace tsdg::cuda {

// The longest k-NN list (with its long-range candidates) the GPU
// diversification takes.
inline constexpr int kMaxDiversifyList = 128;

// Base rows already on the device, with their squared norms for L2.
struct ResidentRows {
  const float* rows = nullptr;
  const float* norms = nullptr;
};

// The buffers of exact_knn on resident rows that a caller searching them again
// and again keeps (an exact set): a search of a few queries then allocates
// nothing and asks the device for no memory figure, each of which costs more
// than the search.
struct ExactKnnScratch {
  DeviceBuffer<float> query_rows;
  DeviceBuffer<float> query_norms;
  DeviceBuffer<float> products;
  DeviceBuffer<float> topk_dists;
  DeviceBuffer<uint32_t> topk_ids;
  DeviceBuffer<float> segment_dists;
  DeviceBuffer<uint32_t> segment_ids;
};

// The largest k of exact_knn and exact_knn_on_device.
inline constexpr int kMaxExactKnnK = 2048;

// bruteforce.cu: cuBLAS products tiled over queries and base, warp top-k
// selection. With resident, base gives only the shape and the device rows
// are used (with scratch, in its buffers, grown as needed); otherwise the
// base is uploaded (whole, or a tile at a time when it does not fit).
void exact_knn(DeviceContext& ctx, MatrixView base, MatrixView queries, Metric metric, int k,
               uint32_t* ids, float* dists, const RunControl& control,
               const ResidentRows* resident = nullptr, ExactKnnScratch* scratch = nullptr);
// The same for queries already on the device (query_count * dim) against
// base_rows resident rows; the results stay on the device (query_count * k),
// the work in scratch's buffers.
void exact_knn_on_device(DeviceContext& ctx, const ResidentRows& base, int64_t base_rows, int dim,
                         const float* queries, int64_t query_count, Metric metric, int k, uint32_t* ids,
                         float* dists, ExactKnnScratch& scratch);
void compute_squared_norms(const float* rows, int64_t count, int dim, float* norms,
                           cudaStream_t stream);
// out (count * dim) = the rows of rows (dim wide) at picked (count, device).
void gather_rows(const float* rows, int dim, const uint32_t* picked, int64_t count, float* out,
                 cudaStream_t stream);

// gnnd.cu: GNND (Wang et al., 2021, section 4); sets that do not fit in GPU memory
// go through gnnd_build_by_shards.
KnnGraph gnnd_build(DeviceContext& ctx, MatrixView data, Metric metric, const GnndParams& params,
                    const RunControl& control);
// GNND with the whole set resident.
KnnGraph gnnd_build_resident(DeviceContext& ctx, MatrixView data, Metric metric,
                             const GnndParams& params, const RunControl& control);

// sharded_build.cpp: the out-of-GPU-memory path of Wang et al., 2021, section 5: a
// GNND graph per shard of shard_rows rows, then GGM between every pair of
// shards, only the pair in use resident; each list keeps its k best over all
// the shards merged so far.
KnnGraph gnnd_build_by_shards(DeviceContext& ctx, MatrixView data, Metric metric,
                              const GnndParams& params, int64_t shard_rows,
                              const RunControl& control);

// ggm.cu: GGM (Wang et al., 2021, section 5).
// The distance from each row to each id of its list (lists = data.rows,
// ids < data.rows, kInvalidId gives +inf), into dists (rows * k).
void list_distances(DeviceContext& ctx, MatrixView data, Metric metric, const uint32_t* ids, int k,
                    float* dists, const RunControl& control);

KnnGraph ggm_merge(DeviceContext& ctx, MatrixView data, int64_t split, const KnnGraph& first,
                   const KnnGraph& second, Metric metric, const GnndParams& params,
                   const RunControl& control);

// diversify.cu: both TSDG stages (Wang, Wang, Zhao, 2022, section 3).
TsdgGraph diversify(DeviceContext& ctx, MatrixView data, Metric metric, const KnnGraph& knn,
                    const DiversifyParams& params, const RunControl& control);
// The same with data's rows and the sorted k-NN lists (nodes * k, flags
// cleared) already on the device.
TsdgGraph diversify_resident(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                             const uint32_t* device_knn_ids, const float* device_knn_dists, int k,
                             const DiversifyParams& params, const RunControl& control);
// The same into lists the caller owns (a merge's output); with relinked
// (graph.nodes flags, may be null), the lists go out in Phase::Link, its
// progress counting those in graph (in row order), and the component linking
// marks the lists it changes after that. before_stage_two (may be empty)
// runs between the stages, before any list goes out.
void diversify_resident_into(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                             const uint32_t* device_knn_ids, const float* device_knn_dists, int k,
                             const DiversifyParams& params, const RunControl& control, GraphSpan graph,
                             uint8_t* relinked, const std::function<void()>& before_stage_two = {});

// The same from k-NN lists on the host (a merge's lists with their
// long-range candidates), stage 2 in Phase::Link when relinked is given.
void diversify_host_lists_into(DeviceContext& ctx, MatrixView data, const float* device_rows, Metric metric,
                               const KnnGraph& knn, const DiversifyParams& params, const RunControl& control,
                               GraphSpan graph, uint8_t* relinked);

// k-NN lists on the device: nodes * k ids and distances.
struct DeviceKnnLists {
  DeviceBuffer<uint32_t> ids;
  DeviceBuffer<float> dists;
  int k = 0;
};

// long_range.cu: the lists of with_long_range_candidates (long_range.h) at
// most kMaxDiversifyList wide, for every row, from sorted k-NN lists and the
// rows on the device (nodes * dim); the pivots' search on the device.
DeviceKnnLists with_long_range_candidates_on_device(DeviceContext& ctx, const float* device_rows, int64_t nodes,
                                                    int dim, Metric metric, const uint32_t* knn_ids,
                                                    const float* knn_dists, int knn_k,
                                                    const DiversifyParams& params, const RunControl& control);

// Both TSDG stages on the k-NN lists widened by their long-range candidates
// as above: with the rows and the lists (released once widened) on the
// device, or from the host.
TsdgGraph diversify_resident_with_long_range(DeviceContext& ctx, MatrixView data, const float* device_rows,
                                             Metric metric, DeviceKnnLists knn, const DiversifyParams& params,
                                             const RunControl& control);
TsdgGraph diversify_with_long_range(DeviceContext& ctx, MatrixView data, Metric metric, const KnnGraph& knn,
                                    const DiversifyParams& params, const RunControl& control);

// index_merge.cu: a merge's computation (merge.h) with the rows and the
// lists on the device from the old lists' distances through GGM and both
// TSDG stages over the whole graph; only for merges merge_fits_on_device
// accepts and of batches above a hundredth of the indexed rows (the others
// run Backend::merge_graph's CPU steps).
bool merge_fits_on_device(MatrixView data, const GnndParams& gnnd);
void merge_graph(DeviceContext& ctx, const MergeInput& in, const MergeOutput& out, Metric metric,
                 const GnndParams& params, const DiversifyParams& diversify, const RunControl& control);

// index_build.cu: GNND then both TSDG stages with the rows and the k-NN lists
// kept on the device between them; the k-NN lists go to knn_ids / knn_dists
// (nodes * gnnd.k, each nullable), and the device's rows to rows_left where
// it is not null. Only for sets build_fits_on_device accepts: the others take
// the two steps apart (GNND by shards when needed).
bool build_fits_on_device(MatrixView data, const GnndParams& gnnd, const DiversifyParams& diversify);
// What build_fits_on_device lacks of device memory for data (0: it fits, or no memory would let it).
size_t build_device_shortfall(MatrixView data, const GnndParams& gnnd, const DiversifyParams& diversify);
TsdgGraph build_tsdg_graph(DeviceContext& ctx, MatrixView data, Metric metric, const GnndParams& gnnd,
                           const DiversifyParams& diversify, uint32_t* knn_ids, float* knn_dists,
                           const RunControl& control, DeviceBuffer<float>* rows_left);

}  // namespace tsdg::cuda
