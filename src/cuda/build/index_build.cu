// The build of an index on the GPU: GNND (gnnd.cu), the long-range candidates
// (long_range.cu), then both TSDG stages (diversify.cu), with the rows and the
// k-NN lists left on the device between them where it can: taking the lists to the host and back costs more than
// GNND itself. Only the lists the caller keeps and the search graph come back.

#include "gnnd_workspace.h"
#include "gpu_algorithms.h"
#include "knn_lists.cuh"
#include "long_range.h"
#include "device_phase_trace.h"

namespace tsdg::cuda {
namespace {

// The rows, GNND's workspace, the widened lists and what diversification
// adds to lists of that width (pruned lists, reverse edges), all at once.
size_t build_bytes(MatrixView data, int k, int samples, const DiversifyParams& diversify) {
  const size_t n = static_cast<size_t>(data.rows);
  const size_t width = has_long_range_candidates(diversify) ? kMaxDiversifyList : k;
  const size_t widened = has_long_range_candidates(diversify) ? n * (width + diversify.pivot_candidates + 1) * 8 : 0;
  return n * data.dim * sizeof(float) + GnndWorkspace::bytes_needed(data.rows, k, samples) + widened +
         n * width * (16 + 16) + n * 24;
}

bool build_shape_fits(MatrixView data, const GnndParams& gnnd) {
  return data.rows > 4 * static_cast<int64_t>(gnnd.k) && data.rows < static_cast<int64_t>(kIdMask);
}

}  // namespace

bool build_fits_on_device(MatrixView data, const GnndParams& gnnd, const DiversifyParams& diversify) {
  return build_shape_fits(data, gnnd) &&
         build_bytes(data, gnnd.k, checked_sample_count(gnnd), diversify) <= usable_device_memory();
}

size_t build_device_shortfall(MatrixView data, const GnndParams& gnnd, const DiversifyParams& diversify) {
  if (!build_shape_fits(data, gnnd)) return 0;
  const size_t needed = build_bytes(data, gnnd.k, checked_sample_count(gnnd), diversify);
  const size_t usable = usable_device_memory();
  return needed > usable ? needed - usable : 0;
}

TsdgGraph build_tsdg_graph(DeviceContext& ctx, MatrixView data, Metric metric, const GnndParams& gnnd,
                           const DiversifyParams& diversify_params, uint32_t* knn_ids, float* knn_dists,
                           const RunControl& control, DeviceBuffer<float>* rows_left) {
  const int samples = checked_sample_count(gnnd);
  cudaStream_t stream = ctx.stream.get();
  PhaseTrace trace("build", stream);
  control.set_phase(Phase::KnnGraph);
  DeviceMatrix rows = DeviceMatrix::upload(data, stream);
  trace.mark("rows up");
  GnndWorkspace ws(data.rows, gnnd.k, samples);
  ws.clear(stream);
  fill_random_lists(ws, rows.values.data(), data.dim, metric, gnnd.seed, stream);
  run_gnnd_iterations(ctx, ws, rows.values.data(), data.dim, metric, gnnd, -1, control);
  sort_lists(ws, stream);
  trace.mark("gnnd");
  const size_t entries = static_cast<size_t>(data.rows) * gnnd.k;
  if (knn_ids != nullptr) copy_to_host(knn_ids, ws.ids.data(), entries, stream);
  if (knn_dists != nullptr) copy_to_host(knn_dists, ws.dists.data(), entries, stream);
  ctx.stream.synchronize();
  trace.mark("k-NN lists to the host");
  // Only the sorted lists are read from here on.
  ws.locks.release();
  ws.new_samples.release();
  ws.old_samples.release();
  control.set_phase(Phase::Diversify);
  TsdgGraph graph =
      has_long_range_candidates(diversify_params)
          ? diversify_resident_with_long_range(ctx, data, rows.values.data(), metric,
                                               DeviceKnnLists{std::move(ws.ids), std::move(ws.dists), gnnd.k},
                                               diversify_params, control)
          : diversify_resident(ctx, data, rows.values.data(), metric, ws.ids.data(), ws.dists.data(), gnnd.k,
                               diversify_params, control);
  trace.mark("long-range candidates + diversify");
  if (rows_left != nullptr) *rows_left = std::move(rows.values);
  return graph;
}

}  // namespace tsdg::cuda
