// A merge's computation on the GPU (merge.h): the rows go to the device once;
// the old lists' distances (the index keeps ids only), the incremental GGM
// and both TSDG stages over the whole graph then run on the rows and lists
// already there, and only the merged k-NN lists and the search graph come
// back: run step by step, each with its own copies, a merge spends most of
// its time in copies.
#include <algorithm>
#include <future>
#include <vector>

#include "backend.h"
#include "ggm.h"
#include "gnnd_workspace.h"
#include "gpu_algorithms.h"
#include "host_memory.h"
#include "knn_lists.cuh"
#include "long_range.h"
#include "device_phase_trace.h"

namespace tsdg::cuda {
namespace {

// The rows, the original lists (ids and distances), GGM's workspace and what
// diversification adds (pruned lists, reverse edges), all at once.
size_t merge_bytes(MatrixView data, int k, int samples) {
  const size_t n = static_cast<size_t>(data.rows);
  return n * data.dim * sizeof(float) + n * k * 8 + GnndWorkspace::bytes_needed(data.rows, k, samples) +
         n * k * (16 + 16) + n * 24;
}

void check_merge_input(const MergeInput& in, int k, int degree) {
  const int64_t batch = in.data.rows - in.split;
  if (in.split < 0 || batch < 0 || in.k != k || in.degree != degree || in.old_knn_ids == nullptr ||
      in.old_neighbors == nullptr ||
      in.old_lambdas == nullptr || in.batch_knn == nullptr || in.batch_knn->nodes != batch ||
      in.batch_knn->k != k) {
    throw Error(Status::InvalidArgument, "merge: the old and batch graphs do not match the rows");
  }
}

// For every batch row, the nearest of the merge's seed pivots (ggm.h), as
// indexed rows: the brute force of the batch against the pivots, gathered
// from the merge's rows on the device.
std::vector<uint32_t> nearest_seed_pivots(DeviceContext& ctx, MatrixView data, const float* device_rows,
                                          int64_t split, Metric metric, uint64_t seed, const RunControl& control) {
  const int64_t batch = data.rows - split;
  cudaStream_t stream = ctx.stream.get();
  PhaseTrace trace("merge seed pivots", stream);
  const std::vector<uint32_t> pivot_rows = merge_seed_pivots(split, seed);
  const auto count = static_cast<int64_t>(pivot_rows.size());
  DeviceBuffer<uint32_t> picked(pivot_rows.size());
  DeviceBuffer<float> pivots(static_cast<size_t>(count) * data.dim);
  DeviceBuffer<float> norms(metric == Metric::L2 ? pivot_rows.size() : 0);
  copy_to_device(picked.data(), pivot_rows.data(), pivot_rows.size(), stream);
  gather_rows(device_rows, data.dim, picked.data(), count, pivots.data(), stream);
  if (metric == Metric::L2) compute_squared_norms(pivots.data(), count, data.dim, norms.data(), stream);
  trace.mark("rows gathered on the device", static_cast<long long>(count));
  std::vector<uint32_t> nearest(batch);
  std::vector<float> dists(batch);
  RunControl without_progress = control;  // the merge's progress counts its own steps
  without_progress.progress_done = nullptr;
  without_progress.progress_total = nullptr;
  const ResidentRows resident{pivots.data(), metric == Metric::L2 ? norms.data() : nullptr};
  exact_knn(ctx, MatrixView{nullptr, count, data.dim}, data.slice(split, batch), metric, 1, nearest.data(),
            dists.data(), without_progress, &resident);
  trace.mark("nearest to each batch row");
  for (uint32_t& p : nearest) p = pivot_rows[p];
  return nearest;
}

}  // namespace

bool merge_fits_on_device(MatrixView data, const GnndParams& gnnd) {
  return data.rows > 4 * static_cast<int64_t>(gnnd.k) && data.rows < static_cast<int64_t>(kIdMask) &&
         merge_bytes(data, gnnd.k, checked_sample_count(gnnd)) <= usable_device_memory();
}

void merge_graph(DeviceContext& ctx, const MergeInput& in, const MergeOutput& out, Metric metric,
                 const GnndParams& params, const DiversifyParams& diversify, const RunControl& control) {
  const int k = params.k;
  check_merge_input(in, k, diversify.degree);
  const int64_t n = in.data.rows;
  const int64_t split = in.split;
  const int64_t batch = n - split;
  const int dim = in.data.dim;
  const size_t old_entries = static_cast<size_t>(split) * k;
  const size_t batch_entries = static_cast<size_t>(batch) * k;
  cudaStream_t stream = ctx.stream.get();
  PhaseTrace trace("merge", stream);
  control.set_phase(Phase::Merge);

  const float* resident_rows = in.old_rows_index != nullptr ? in.old_rows_index->device_rows() : nullptr;
  const bool old_rows_on_device = resident_rows != nullptr && on_current_device(resident_rows);
  if (!old_rows_on_device) wait_for_old_rows(in);
  DeviceMatrix rows = old_rows_on_device ? DeviceMatrix::upload_after(in.data, resident_rows, split, stream)
                                         : DeviceMatrix::upload(in.data, stream);
  trace.mark(old_rows_on_device ? "rows (old ones on the device)" : "rows");
  // Every row's list with global ids: the old ones as given, the batch's
  // moved past split.
  DeviceBuffer<uint32_t> original_ids(old_entries + batch_entries);
  DeviceBuffer<float> original_dists(old_entries + batch_entries);
  const std::vector<uint32_t> batch_ids = ids_past(*in.batch_knn, split);
  copy_to_device(original_ids.data(), in.old_knn_ids, old_entries, stream);
  copy_to_device(original_ids.data() + old_entries, batch_ids.data(), batch_entries, stream);
  copy_to_device(original_dists.data() + old_entries, in.batch_knn->dists.data(), batch_entries, stream);
  trace.mark("k-NN lists");
  if (in.old_knn_dists == nullptr) {
    list_distances_resident(rows.values.data(), dim, metric, original_ids.data(), split, k,
                            original_dists.data(), stream);
  } else {
    copy_to_device(original_dists.data(), in.old_knn_dists, old_entries, stream);
  }
  trace.mark("old lists' distances");

  DeviceBuffer<uint32_t> batch_starts(batch);
  const std::vector<uint32_t> starts =
      nearest_seed_pivots(ctx, in.data, rows.values.data(), split, metric, params.seed, control);
  copy_to_device(batch_starts.data(), starts.data(), starts.size(), stream);
  trace.mark("batch rows' start rows");

  GnndWorkspace ws(n, k, checked_sample_count(params));
  // The caller's large output arrays (a fresh shared memory segment on the
  // worker) are mapped while GGM runs, not by the copies back; and only from
  // here, as the mapping holds up the device allocations above.
  const size_t entries = static_cast<size_t>(n) * k;
  const size_t slots = static_cast<size_t>(n) * diversify.degree;
  const BackgroundPopulate output_pages({{out.knn_ids, entries * sizeof(uint32_t)},
                                         {out.knn_dists, out.knn_dists != nullptr ? entries * sizeof(float) : 0},
                                         {out.neighbors, slots * sizeof(uint32_t)},
                                         {out.lambdas, slots * sizeof(uint8_t)}});
  ggm_merge_incremental_resident(ctx, ws, rows.values.data(), dim, split, original_ids.data(),
                                 original_dists.data(), batch_starts.data(), metric, params, control);
  ctx.stream.synchronize();
  trace.mark("ggm");
  // Only the merged lists are read from here on.
  batch_starts.release();
  original_ids.release();
  original_dists.release();
  ws.locks.release();
  ws.new_samples.release();
  ws.old_samples.release();
  // The merged k-NN lists go to the host from a thread and a stream of their
  // own while the device diversifies them, so that the diversification need
  // not wait for the copy. That thread enters
  // Phase::Diversify once they are there (the caller may write them out from
  // then on, merge.h); stage 2 waits for it, as Phase::Link follows. (A
  // release above would wait for the copy: freeing device memory synchronizes.)
  std::future<void> knn_to_host = std::async(std::launch::async, [&] {
    TSDG_CUDA_CHECK(cudaSetDevice(ctx.device));
    Stream copies;
    copy_to_host(out.knn_ids, ws.ids.data(), entries, copies.get());
    if (out.knn_dists != nullptr) copy_to_host(out.knn_dists, ws.dists.data(), entries, copies.get());
    copies.synchronize();
    set_knn_change(lists_changed_by_batch(out.knn_ids, n, k, split, RunControl{}).data(), in, out);
    control.set_phase(Phase::Diversify);
  });

  wait_for_old_rows(in);  // the component linking reads them on the host
  const GraphSpan search{out.neighbors, out.lambdas, n, diversify.degree};
  if (!has_long_range_candidates(diversify)) {
    diversify_resident_into(ctx, in.data, rows.values.data(), metric, ws.ids.data(), ws.dists.data(), k, diversify,
                            control, search, out.relinked, [&] { knn_to_host.get(); });
  } else {
    // Every list is diversified again, so every list takes its long-range
    // candidates, as in a fresh build; they join the lists on the host.
    KnnGraph lists(n, k, KnnGraph::Unfilled{});
    copy_to_host(lists.ids.data(), ws.ids.data(), entries, stream);
    copy_to_host(lists.dists.data(), ws.dists.data(), entries, stream);
    ctx.stream.synchronize();
    knn_to_host.get();
    ws.ids.release();
    ws.dists.release();
    const ExactSearch exact = [&](MatrixView base, MatrixView queries, int count, uint32_t* ids, float* dists) {
      exact_knn(ctx, base, queries, metric, count, ids, dists, control);
    };
    const KnnGraph candidates = with_long_range_candidates(in.data, metric, lists, diversify, exact, control,
                                                                nullptr, kMaxDiversifyList);
    DiversifyParams widened = diversify;
    widened.pivot_candidates = 0;
    widened.random_candidates = 0;
    diversify_host_lists_into(ctx, in.data, rows.values.data(), metric, candidates, widened, control, search,
                              out.relinked);
  }
  set_search_changed(in, out, control);
  trace.mark("diversify + search lists to the host");
}

}  // namespace tsdg::cuda
