// The C interface of tsdg_capi.h for building and merging graphs and the
// exact k-NN: the backend's k-NN graph (exact on few rows, else GNND),
// diversified or merged, run on a worker thread while the calling thread
// polls the caller every 50 ms.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <future>
#include <limits>
#include <mutex>
#include <string>
#include <thread>

#include "backend.h"
#include "capi_internal.h"
#include "distance.h"
#include "diversify.h"
#include "entry_points.h"
#include "ggm.h"
#include "host_memory.h"
#include "navigating_layer.h"
#include "phase_trace.h"
#include "search.h"
#include "spill_files.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

using namespace tsdg::detail;

namespace {

// Below this many rows the k-NN graph is computed exactly: it is cheap, and
// GNND needs lists that can be filled from more rows than k.
constexpr int64_t kExactGraphRows = 4096;
// A merge's batch graph (it only seeds GGM) is exact up to this many rows:
// cheaper than GNND there, whose iterations rarely reach the update-rate
// stop on so few rows.
constexpr int64_t kExactBatchGraphRows = 16384;
constexpr auto kPollInterval = std::chrono::milliseconds(50);
// A merge's copy of the old rows runs beside the new rows' GNND and the
// uploads, which it would slow whatever its threads if it mapped its pages
// ahead: the mapping holds the mmap lock that device allocations wait for. So it maps
// them as it writes; it has until the component linking, a second later.
constexpr int kBackgroundCopyThreads = 4;

// The old rows that lost an edge into them a merge on the CPU asks to check
// at most, per row it checks anyway (its new rows, and those the caller
// marked): so that the checks, a walk on the host each, follow the merge's
// size. Past it, those that lost the largest share of their edges are
// checked. A device's merge diversifies every list again and its index
// checks rows with its batch searches: it asks for every row.
constexpr int64_t kRecheckedPerCheckedRow = 8;

void validate_build_params(const TsdgBuildParams* params) {
  require(params != nullptr, "build parameters must not be NULL");
  require(params->degree > 0, "degree must be positive");
  require(params->build_k > 0, "build_k must be positive");
  require(params->samples >= 0, "samples must not be negative");
  require(params->iterations > 0, "iterations must be positive");
  require(params->alpha >= 1.0f, "alpha must be >= 1");
  require(params->lambda0 >= 0 && params->lambda0 <= TSDG_LAMBDA0_MAX,
          ("lambda0 must be in [0, " + std::to_string(TSDG_LAMBDA0_MAX) + "]").c_str());
}

tsdg::GnndParams gnnd_params(const TsdgBuildParams& params) {
  tsdg::GnndParams gnnd;
  gnnd.k = params.build_k;
  gnnd.samples = params.samples > 0 ? params.samples : tsdg::default_gnnd_samples(params.build_k, false, 0);
  gnnd.iterations = params.iterations;
  gnnd.seed = params.seed;
  return gnnd;
}

// A full build's GNND of rows rows on backend b (default_gnnd_samples where
// the samples are left to the build; merges keep half, gnnd_params).
tsdg::GnndParams build_gnnd_params(const TsdgBuildParams& params, const tsdg::Backend& b, int64_t rows) {
  tsdg::GnndParams gnnd = gnnd_params(params);
  if (params.samples == 0) {
    gnnd.samples = tsdg::default_gnnd_samples(params.build_k, std::string(b.name()) == "cpu", rows);
  }
  return gnnd;
}

tsdg::DiversifyParams diversify_params(const TsdgBuildParams& params) {
  tsdg::DiversifyParams diversify;
  diversify.degree = params.degree;
  diversify.alpha = params.alpha;
  diversify.lambda0 = params.lambda0;
  return diversify;
}

// a k-NN list's entry: an id and its distance
constexpr size_t kEdgeBytes = sizeof(uint32_t) + sizeof(float);

// The bytes the diversification of k-NN lists of k holds per row: each list
// widened with the long-range candidates (and the row itself among its
// nearest pivots), stage 1's pruned lists and their reverse edges.
size_t diversify_bytes_per_row(int k, const tsdg::DiversifyParams& diversify) {
  const auto width = static_cast<size_t>(k + diversify.pivot_candidates + 1 + diversify.random_candidates);
  return 3 * kEdgeBytes * width;
}

bool wants_exact_graph(tsdg::MatrixView data, const tsdg::GnndParams& params) {
  return data.rows <= std::max<int64_t>(kExactGraphRows, 4 * int64_t{params.k});
}

tsdg::KnnGraph knn_graph(tsdg::Backend& backend, tsdg::MatrixView data, tsdg::Metric metric,
                         const tsdg::GnndParams& params, const tsdg::RunControl& control) {
  if (wants_exact_graph(data, params)) return tsdg::exact_knn_graph_of(backend, data, metric, params.k, control);
  return backend.build_knn_graph(data, metric, params, control);
}

void copy_graph_out(const tsdg::TsdgGraph& graph, int degree, uint32_t* neighbors,
                    uint8_t* lambdas) {
  if (graph.degree != degree) {
    throw Error(Status::Internal, "the backend returned a graph of another degree");
  }
  std::copy(graph.neighbors.begin(), graph.neighbors.end(), neighbors);
  std::copy(graph.lambdas.begin(), graph.lambdas.end(), lambdas);
}

void copy_knn_out(const tsdg::KnnGraph& knn, int k, uint32_t* ids, float* dists) {
  if (ids == nullptr && dists == nullptr) return;
  if (knn.k != k) throw Error(Status::Internal, "the backend returned a k-NN graph of another k");
  if (ids != nullptr) std::copy(knn.ids.begin(), knn.ids.end(), ids);
  if (dists != nullptr) std::copy(knn.dists.begin(), knn.dists.end(), dists);
}

// What the poll loop of run_polled waits on: the work's end, or the work's
// call for a poll (RunControl::poll_now).
struct PollWakeup {
  std::mutex mutex;
  std::condition_variable signal;
  bool finished = false;
  bool poll_now = false;

  static void wake(void* arg) {
    auto* wakeup = static_cast<PollWakeup*>(arg);
    {
      std::lock_guard<std::mutex> lock(wakeup->mutex);
      wakeup->poll_now = true;
    }
    wakeup->signal.notify_all();
  }
};

// Runs work(control, phase) on a worker thread with a thread pool, while the
// calling thread reports progress to poll every 50 ms, and at once when the
// work enters a phase or asks for it, and sets the cancel flag when poll asks
// for it. The phase is read before the progress: a poll that sees a phase
// sees its progress, not the step's before. Rethrows what work threw.
template <class Work>
void run_polled(int threads, TsdgPollFn poll, void* poll_arg, Work work) {
  tsdg::ThreadPool pool(threads);
  std::atomic<bool> cancel{false};
  std::atomic<int64_t> done{0};
  std::atomic<int64_t> total{0};
  std::atomic<int> phase{TSDG_PHASE_KNN_GRAPH};
  PollWakeup wakeup;
  tsdg::RunControl control;
  control.pool = &pool;
  control.cancel = &cancel;
  control.progress_done = &done;
  control.progress_total = &total;
  control.phase = &phase;
  control.poll_now = PollWakeup::wake;
  control.poll_now_arg = &wakeup;

  std::exception_ptr failure;
  std::thread worker([&] {
    try {
      work(control, phase);
    } catch (...) {
      failure = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(wakeup.mutex);
    wakeup.finished = true;
    wakeup.signal.notify_all();
  });
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(wakeup.mutex);
      wakeup.signal.wait_for(lock, kPollInterval, [&] { return wakeup.finished || wakeup.poll_now; });
      if (wakeup.finished) break;
      wakeup.poll_now = false;
    }
    const auto seen_phase = static_cast<TsdgBuildPhase>(phase.load(std::memory_order_acquire));
    const int64_t seen_total = total.load(std::memory_order_acquire);
    const int64_t seen_done = done.load(std::memory_order_acquire);
    if (poll != nullptr && poll(poll_arg, seen_phase, seen_done, seen_total)) cancel.store(true);
  }
  worker.join();
  if (failure) std::rethrow_exception(failure);
}

// A merge's old k-NN lists (n_old * k) must hold ids of old rows only.
void check_old_ids(const uint32_t* old_knn_ids, int64_t n_old, int k, const tsdg::RunControl& control) {
  tsdg::parallel_for(control, n_old, 1024, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin * k; i < end * k; ++i) {
      if (old_knn_ids[i] != TSDG_INVALID_ID && old_knn_ids[i] >= n_old) {
        throw Error(Status::InvalidArgument, "an old k-NN list holds an id past the old rows");
      }
    }
  });
}

// The old k-NN graph of a full merge from the caller's arrays (n_old * k):
// the distances as given, or computed by the backend where old_knn_dists is
// NULL (an index keeps only the ids).
tsdg::KnnGraph old_knn_graph(tsdg::Backend& backend, tsdg::MatrixView data, int64_t n_old, int k,
                             tsdg::Metric metric, const uint32_t* old_knn_ids,
                             const float* old_knn_dists, const tsdg::RunControl& control) {
  check_old_ids(old_knn_ids, n_old, k, control);
  tsdg::KnnGraph old_graph(n_old, k);
  std::copy(old_knn_ids, old_knn_ids + n_old * k, old_graph.ids.begin());
  if (old_knn_dists != nullptr) {
    std::copy(old_knn_dists, old_knn_dists + n_old * k, old_graph.dists.begin());
    for (int64_t i = 0; i < n_old * k; ++i) {
      if (old_graph.ids[i] == TSDG_INVALID_ID) old_graph.dists[i] = std::numeric_limits<float>::infinity();
    }
  } else {
    backend.list_distances(data.slice(0, n_old), metric, old_graph.ids.data(), k, old_graph.dists.data(),
                           control);
  }
  return old_graph;
}

// whether node u's search list and lambdas are the same in both graphs
bool same_list(const uint32_t* old_neighbors, const uint8_t* old_lambdas, const uint32_t* neighbors,
               const uint8_t* lambdas, int64_t u, int degree) {
  const size_t at = static_cast<size_t>(u) * degree;
  return std::equal(neighbors + at, neighbors + at + degree, old_neighbors + at) &&
         std::equal(lambdas + at, lambdas + at + degree, old_lambdas + at);
}

}  // namespace

extern "C" {

// ---- build and merge ----

void tsdg_build_params_default(TsdgBuildParams* params) {
  const tsdg::GnndParams gnnd;
  const tsdg::DiversifyParams diversify;
  params->degree = diversify.degree;
  params->build_k = gnnd.k;
  params->samples = 0;
  params->iterations = gnnd.iterations;
  params->alpha = diversify.alpha;
  params->lambda0 = diversify.lambda0;
  params->seed = gnnd.seed;
  params->threads = 0;
}

size_t tsdg_build_bytes_per_row(int dim, const TsdgBuildParams* params) {
  const auto dims = static_cast<size_t>(dim);
  const auto degree = static_cast<size_t>(params->degree);
  const auto k = static_cast<size_t>(params->build_k);
  return 2 * sizeof(float) * dims                             // the caller's rows, GNND's copy
         + 2 * (sizeof(uint32_t) + sizeof(uint8_t)) * degree  // the graph, the core's and the caller's
         + sizeof(uint32_t) * k                               // the caller's k-NN ids
         + kEdgeBytes * k                                     // GNND's lists
         + diversify_bytes_per_row(params->build_k, diversify_params(*params));
}

size_t tsdg_layer_bytes(int64_t n, int dim, const TsdgBuildParams* params) {
  const auto nodes = static_cast<size_t>(tsdg::layer_node_count(n));
  const auto degree = static_cast<size_t>(params->degree);
  return nodes * (sizeof(float) * static_cast<size_t>(dim)              // the layer's rows, gathered
                  + 2 * (sizeof(uint32_t) + sizeof(uint8_t)) * degree   // its graph, the core's and the caller's
                  + kEdgeBytes * static_cast<size_t>(tsdg::kLayerKnn)   // its k-NN lists
                  + diversify_bytes_per_row(tsdg::kLayerKnn, diversify_params(*params)));
}

void tsdg_set_spill_directory(const char* directory, size_t min_bytes) {
  tsdg::set_spill_directory(directory != nullptr ? directory : "", min_bytes);
}

TsdgStatus tsdg_spill_allocate(size_t bytes, void** memory, TsdgError* error) {
  *memory = nullptr;
  return guarded(error, [&] {
    *memory = tsdg::spill_allocate(bytes, true);
    require(*memory != nullptr, "no spill directory is set");
  });
}

void tsdg_spill_free(void* memory) { tsdg::spill_free(memory); }

namespace {

// The layer the build's or merge's check walks from, as the searches do;
// none under inner product, which the check leaves alone. With layer_ids,
// the caller's layer (built under inner product too), written out.
tsdg::TsdgGraph check_layer(tsdg::Backend& b, tsdg::MatrixView data, tsdg::Metric metric,
                            const tsdg::DiversifyParams& diversify, const TsdgBuildParams* params,
                            uint32_t* layer_ids, uint8_t* layer_lambdas, const tsdg::RunControl& control) {
  if (layer_ids == nullptr && metric == tsdg::Metric::InnerProduct) return tsdg::TsdgGraph{};
  tsdg::TsdgGraph layer = tsdg::build_navigating_layer(b, data, metric, diversify, params->seed, control);
  if (layer_ids != nullptr && layer.nodes > 0) copy_graph_out(layer, params->degree, layer_ids, layer_lambdas);
  return layer;
}

// tsdg_build_graph; with changed, tsdg_build_graph_marked: the search lists
// go out before the build's check, which changes a few of them in place.
TsdgStatus build_graph(TsdgBackend* backend, const float* rows, int64_t n, int dim,
                       TsdgMetric metric, const TsdgBuildParams* params, uint32_t* neighbors,
                       uint8_t* lambdas, uint32_t* knn_ids, float* knn_dists, uint8_t* changed,
                       uint32_t* layer_ids, uint8_t* layer_lambdas, TsdgPollFn poll, void* poll_arg,
                       TsdgError* error) {
  return guarded(error, [&] {
    validate_rows(rows, n, dim);
    validate_build_params(params);
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    tsdg::Backend& b = backend_of(backend);
    const tsdg::Metric m = backend_metric(b, metric);
    const tsdg::MatrixView data{rows, n, dim};
    const tsdg::GnndParams gnnd = build_gnnd_params(*params, b, n);
    const tsdg::DiversifyParams diversify = diversify_params(*params);
    run_polled(params->threads, poll, poll_arg,
               [&](const tsdg::RunControl& control, std::atomic<int>&) {
                 // The output arrays may lie in memory the caller has just
                 // mapped (the worker's shared segment): a thread maps their
                 // pages while the graph is computed, so that the copies into
                 // them later do not stop at every page.
                 const size_t entries = static_cast<size_t>(n) * params->build_k;
                 const size_t edges = static_cast<size_t>(n) * params->degree;
                 const tsdg::BackgroundPopulate outputs_mapped(
                     {{knn_ids, knn_ids != nullptr ? entries * sizeof(uint32_t) : 0},
                      {knn_dists, knn_dists != nullptr ? entries * sizeof(float) : 0},
                      {neighbors, edges * sizeof(uint32_t)},
                      {lambdas, edges},
                      {changed, changed != nullptr ? static_cast<size_t>(n) : 0}});
                 tsdg::PhaseTrace trace("build");
                 tsdg::TsdgGraph graph;
                 std::unique_ptr<tsdg::DeviceRows> rows_left;
                 if (wants_exact_graph(data, gnnd)) {
                   const tsdg::KnnGraph knn = tsdg::exact_knn_graph_of(b, data, m, gnnd.k, control);
                   copy_knn_out(knn, params->build_k, knn_ids, knn_dists);
                   control.set_phase(tsdg::Phase::Diversify);
                   graph = b.diversify(data, m, knn, diversify, control);
                 } else {
                   graph = b.build_tsdg_graph(data, m, gnnd, diversify, knn_ids, knn_dists, control, &rows_left);
                 }
                 trace.mark("graph");
                 if (changed == nullptr) {
                   const tsdg::TsdgGraph layer =
                       check_layer(b, data, m, diversify, params, layer_ids, layer_lambdas, control);
                   trace.mark("layer");
                   tsdg::link_rows_missed_by_narrow_walks(b, data, m, tsdg::GraphSpan::of(graph), control,
                                                          tsdg::kBuildCheckRows, {}, std::move(rows_left),
                                                          nullptr, tsdg::GraphView::of(layer));
                   trace.mark("check");
                   copy_graph_out(graph, params->degree, neighbors, lambdas);
                   trace.mark("graph out");
                   return;
                 }
                 // the lists go out first: the caller writes them while the
                 // layer and the check are computed
                 copy_graph_out(graph, params->degree, neighbors, lambdas);
                 graph = tsdg::TsdgGraph{};
                 trace.mark("graph out");
                 std::fill(changed, changed + n, uint8_t{0});
                 control.set_total(n);
                 control.set_phase(tsdg::Phase::Link);
                 control.add_done(n);
                 control.wake_poll();
                 const tsdg::RunControl lists_out = control.without_progress();
                 const tsdg::TsdgGraph layer =
                     check_layer(b, data, m, diversify, params, layer_ids, layer_lambdas, lists_out);
                 trace.mark("layer");
                 tsdg::link_rows_missed_by_narrow_walks(
                     b, data, m, tsdg::GraphSpan{neighbors, lambdas, n, params->degree}, lists_out,
                     tsdg::kBuildCheckRows, [&](uint32_t node) { changed[node] = TSDG_CHANGED_LINK; },
                     std::move(rows_left), nullptr, tsdg::GraphView::of(layer));
                 trace.mark("check");
               });
  });
}

}  // namespace

size_t tsdg_build_device_shortfall(TsdgBackend* backend, int64_t n, int dim, const TsdgBuildParams* params) {
  size_t shortfall = 0;
  TsdgError error;
  guarded(&error, [&] {
    validate_build_params(params);
    require(n >= 0 && dim > 0, "the rows' shape must not be negative");
    tsdg::Backend& b = backend_of(backend);
    const tsdg::MatrixView shape{nullptr, n, dim};
    shortfall = b.build_device_shortfall(shape, build_gnnd_params(*params, b, n), diversify_params(*params));
  });
  return shortfall;
}

TsdgStatus tsdg_build_graph(TsdgBackend* backend, const float* rows, int64_t n, int dim,
                            TsdgMetric metric, const TsdgBuildParams* params, uint32_t* neighbors,
                            uint8_t* lambdas, uint32_t* knn_ids, float* knn_dists, TsdgPollFn poll,
                            void* poll_arg, TsdgError* error) {
  return build_graph(backend, rows, n, dim, metric, params, neighbors, lambdas, knn_ids, knn_dists,
                     nullptr, nullptr, nullptr, poll, poll_arg, error);
}

TsdgStatus tsdg_build_graph_with_layer(TsdgBackend* backend, const float* rows, int64_t n, int dim,
                                       TsdgMetric metric, const TsdgBuildParams* params, uint32_t* neighbors,
                                       uint8_t* lambdas, uint32_t* knn_ids, float* knn_dists,
                                       uint32_t* layer_ids, uint8_t* layer_lambdas, TsdgPollFn poll,
                                       void* poll_arg, TsdgError* error) {
  const TsdgStatus status = guarded(error, [&] {
    require(tsdg::layer_node_count(n) == 0 || (layer_ids != nullptr && layer_lambdas != nullptr),
            "layer_ids and layer_lambdas must not be NULL");
  });
  if (status != TSDG_OK) return status;
  return build_graph(backend, rows, n, dim, metric, params, neighbors, lambdas, knn_ids, knn_dists,
                     nullptr, tsdg::layer_node_count(n) > 0 ? layer_ids : nullptr, layer_lambdas, poll,
                     poll_arg, error);
}

TsdgStatus tsdg_build_graph_marked(TsdgBackend* backend, const float* rows, int64_t n, int dim,
                                   TsdgMetric metric, const TsdgBuildParams* params,
                                   uint32_t* neighbors, uint8_t* lambdas, uint32_t* knn_ids,
                                   float* knn_dists, uint8_t* changed, uint32_t* layer_ids,
                                   uint8_t* layer_lambdas, TsdgPollFn poll, void* poll_arg,
                                   TsdgError* error) {
  const TsdgStatus status = guarded(error, [&] {
    require(n == 0 || changed != nullptr, "changed must not be NULL");
    require((layer_ids == nullptr) == (layer_lambdas == nullptr),
            "layer_ids and layer_lambdas must both be NULL or neither");
  });
  if (status != TSDG_OK) return status;
  return build_graph(backend, rows, n, dim, metric, params, neighbors, lambdas, knn_ids, knn_dists,
                     changed, tsdg::layer_node_count(n) > 0 ? layer_ids : nullptr, layer_lambdas, poll,
                     poll_arg, error);
}

TsdgStatus tsdg_merge_graph(TsdgBackend* backend, const float* rows, int64_t n_old, int64_t n_new,
                            int dim, TsdgMetric metric, const TsdgBuildParams* params,
                            const uint32_t* old_knn_ids, const float* old_knn_dists,
                            uint32_t* knn_ids, float* knn_dists, uint32_t* neighbors,
                            uint8_t* lambdas, TsdgPollFn poll, void* poll_arg, TsdgError* error) {
  return guarded(error, [&] {
    require(n_old >= 0 && n_new >= 0, "row counts must not be negative");
    const int64_t n = n_old + n_new;
    validate_rows(rows, n, dim);
    validate_build_params(params);
    require(n_old == 0 || old_knn_ids != nullptr, "the old k-NN graph must not be NULL");
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    tsdg::Backend& b = backend_of(backend);
    const tsdg::Metric m = backend_metric(b, metric);
    const tsdg::MatrixView data{rows, n, dim};
    const tsdg::GnndParams gnnd = gnnd_params(*params);
    const tsdg::DiversifyParams diversify = diversify_params(*params);
    const int k = params->build_k;
    run_polled(params->threads, poll, poll_arg,
               [&](const tsdg::RunControl& control, std::atomic<int>& phase) {
                 tsdg::KnnGraph merged;
                 if (n_old == 0 || n <= kExactGraphRows) {
                   phase.store(TSDG_PHASE_KNN_GRAPH);
                   merged = knn_graph(b, data, m, gnnd, control);
                 } else if (n_new == 0) {
                   merged = old_knn_graph(b, data, n_old, k, m, old_knn_ids, old_knn_dists, control);
                 } else {
                   phase.store(TSDG_PHASE_KNN_GRAPH);
                   const tsdg::KnnGraph new_graph =
                       knn_graph(b, data.slice(n_old, n_new), m, gnnd, control);
                   // the old lists' distances count with GGM, whose input they are
                   phase.store(TSDG_PHASE_MERGE);
                   const tsdg::KnnGraph old_graph =
                       old_knn_graph(b, data, n_old, k, m, old_knn_ids, old_knn_dists, control);
                   merged = b.merge_knn_graphs(data, n_old, old_graph, new_graph, m, gnnd, control);
                 }
                 phase.store(TSDG_PHASE_DIVERSIFY);
                 const tsdg::TsdgGraph graph = b.diversify(data, m, merged, diversify, control);
                 copy_graph_out(graph, params->degree, neighbors, lambdas);
                 copy_knn_out(merged, k, knn_ids, knn_dists);
               });
  });
}

TsdgStatus tsdg_merge_graph_incremental(TsdgBackend* backend, const float* rows,
                                        const TsdgResidentIndex* old_rows_index,
                                        const float* old_rows_source, int64_t n_old,
                                        int64_t n_new, int dim, TsdgMetric metric,
                                        const TsdgBuildParams* params, const uint32_t* old_knn_ids,
                                        const float* old_knn_dists, const uint32_t* old_neighbors,
                                        const uint8_t* old_lambdas, const uint8_t* old_changed,
                                        uint32_t* knn_ids,
                                        float* knn_dists, uint32_t* neighbors, uint8_t* lambdas,
                                        uint8_t* changed, uint32_t* layer_ids, uint8_t* layer_lambdas,
                                        TsdgPollFn poll, void* poll_arg, TsdgError* error) {
  return guarded(error, [&] {
    require(n_old >= 0 && n_new >= 0, "row counts must not be negative");
    const int64_t n = n_old + n_new;
    require((layer_ids == nullptr) == (layer_lambdas == nullptr),
            "layer_ids and layer_lambdas must both be NULL or neither");
    if (tsdg::layer_node_count(n) == 0) layer_ids = nullptr;
    validate_rows(rows, n, dim);
    validate_build_params(params);
    require(n_old == 0 || (old_knn_ids != nullptr && old_neighbors != nullptr && old_lambdas != nullptr),
            "the old k-NN graph and search graph must not be NULL");
    require(n == 0 || (knn_ids != nullptr && neighbors != nullptr && lambdas != nullptr &&
                       changed != nullptr),
            "output arrays must not be NULL");
    tsdg::Backend& b = backend_of(backend);
    const tsdg::Metric m = backend_metric(b, metric);
    const tsdg::MatrixView data{rows, n, dim};
    tsdg::GnndParams gnnd = gnnd_params(*params);
    const tsdg::DiversifyParams diversify = diversify_params(*params);
    const int k = params->build_k;
    const int degree = params->degree;
    run_polled(params->threads, poll, poll_arg,
               [&](const tsdg::RunControl& control, std::atomic<int>& phase) {
                 // rows is the caller's to write when it hands a source (tsdg_capi.h);
                 // whatever happens below, the copy is complete when this returns
                 std::shared_future<void> old_rows_copied;
                 if (old_rows_source != nullptr && n_old > 0) {
                   old_rows_copied = std::async(std::launch::async, [=] {
                                       tsdg::parallel_copy(const_cast<float*>(rows), old_rows_source,
                                                           sizeof(float) * static_cast<size_t>(n_old) * dim,
                                                           kBackgroundCopyThreads, false);
                                     }).share();
                 }
                 check_old_ids(old_knn_ids, n_old, k, control);
                 phase.store(TSDG_PHASE_KNN_GRAPH);
                 const tsdg::MatrixView batch = data.slice(n_old, n_new);
                 const tsdg::KnnGraph batch_graph =
                     n_new <= kExactBatchGraphRows ? tsdg::exact_knn_graph_of(b, batch, m, gnnd.k, control)
                                                   : knn_graph(b, batch, m, gnnd, control);
                 tsdg::MergeInput in;
                 in.data = data;
                 in.split = n_old;
                 in.k = k;
                 in.degree = degree;
                 in.old_knn_ids = old_knn_ids;
                 in.old_knn_dists = old_knn_dists;
                 in.old_neighbors = old_neighbors;
                 in.old_lambdas = old_lambdas;
                 in.batch_knn = &batch_graph;
                 // the lists to build again; the rows to check again are the caller's
                 std::vector<uint8_t> rebuilt;
                 int64_t caller_rechecks = 0;
                 if (old_changed != nullptr) {
                   rebuilt.resize(n_old);
                   for (int64_t u = 0; u < n_old; ++u) {
                     rebuilt[u] = old_changed[u] & TSDG_OLD_REBUILT;
                     caller_rechecks += (old_changed[u] & TSDG_OLD_RECHECK) != 0;
                   }
                   in.old_rebuilt = rebuilt.data();
                 }
                 if (old_rows_copied.valid()) {
                   in.old_rows_source = old_rows_source;
                   in.old_rows_copied = old_rows_copied;
                 }
                 if (old_rows_index != nullptr && old_rows_index->index != nullptr &&
                     old_rows_index->dim == dim && old_rows_index->index->node_count() >= n_old) {
                   in.old_rows_index = old_rows_index->index.get();
                 }
                 std::vector<uint8_t> knn_change(n), search_changed(n), relinked(n);
                 tsdg::MergeOutput out;
                 out.knn_ids = knn_ids;
                 out.knn_dists = knn_dists;
                 out.neighbors = neighbors;
                 out.lambdas = lambdas;
                 out.knn_change = knn_change.data();
                 out.search_changed = search_changed.data();
                 out.relinked = relinked.data();
                 b.merge_graph(in, out, m, tsdg::incremental_merge_params(gnnd), diversify, control);
                 if (old_rows_copied.valid()) old_rows_copied.get();
                 // The build's check, over the merged graph: the merge's lists
                 // lose long edges as a build's do, and an index grown by merges
                 // must route as a fresh build of its rows does. The device
                 // walks every row, which costs it little. On the host a walk
                 // of every row would cost a small merge more than the rest of
                 // it, so the check walks the rows whose routes the merge can
                 // have changed: the new rows, the nodes whose lists changed
                 // and the rows those lists no longer point to.
                 const bool on_host = std::strcmp(b.name(), "cpu") == 0;
                 std::vector<uint32_t> check_rows;
                 if (on_host) {
                   check_rows = tsdg::rows_losing_in_edges(in, out, n_old, control);
                   for (int64_t u = 0; u < n; ++u) {
                     if (u >= n_old || search_changed[u]) check_rows.push_back(static_cast<uint32_t>(u));
                   }
                 }
                 // a merge that reported TSDG_PHASE_LINK has counted its lists out
                 const tsdg::RunControl lists_out = control.without_progress();
                 const tsdg::TsdgGraph layer =
                     check_layer(b, data, m, diversify, params, layer_ids, layer_lambdas, lists_out);
                 tsdg::link_rows_missed_by_narrow_walks(
                     b, data, m, tsdg::GraphSpan{neighbors, lambdas, n, degree}, lists_out, tsdg::kBuildCheckRows,
                     [&](uint32_t node) { relinked[node] = 1; }, nullptr, on_host ? &check_rows : nullptr,
                     tsdg::GraphView::of(layer));
                 for (int64_t u = 0; u < n; ++u) {
                   if (relinked[u] && !search_changed[u]) {
                     search_changed[u] =
                         u >= n_old || !same_list(old_neighbors, old_lambdas, neighbors, lambdas, u, degree);
                   }
                 }
                 std::vector<uint8_t> recheck(n, 0);
                 const int64_t lost_budget =
                     on_host ? kRecheckedPerCheckedRow * (n_new + caller_rechecks) : n_old;
                 for (const uint32_t v : tsdg::rows_losing_in_edges(in, out, lost_budget, control)) recheck[v] = 1;
                 for (int64_t u = 0; old_changed != nullptr && u < n_old; ++u) {
                   if ((old_changed[u] & TSDG_OLD_RECHECK) != 0) recheck[u] = 1;
                 }
                 for (int64_t u = 0; u < n; ++u) {
                   changed[u] = static_cast<uint8_t>((knn_change[u] ? TSDG_CHANGED_KNN : 0) |
                                                     (search_changed[u] ? TSDG_CHANGED_GRAPH : 0) |
                                                     (relinked[u] ? TSDG_CHANGED_LINK : 0) |
                                                     (recheck[u] ? TSDG_CHANGED_RECHECK : 0));
                 }
               });
  });
}

TsdgStatus tsdg_build_layer(TsdgBackend* backend, const float* rows, int64_t n, int dim, TsdgMetric metric,
                            const TsdgBuildParams* params, uint32_t* ids, uint8_t* lambdas, TsdgPollFn poll,
                            void* poll_arg, TsdgError* error) {
  return guarded(error, [&] {
    validate_rows(rows, n, dim);
    validate_build_params(params);
    const int64_t layer_nodes = tsdg::layer_node_count(n);
    if (layer_nodes == 0) return;
    require(ids != nullptr && lambdas != nullptr, "ids and lambdas must not be NULL");
    tsdg::Backend& b = backend_of(backend);
    const tsdg::Metric m = backend_metric(b, metric);
    const tsdg::DiversifyParams diversify = diversify_params(*params);
    run_polled(params->threads, poll, poll_arg, [&](const tsdg::RunControl& control, std::atomic<int>&) {
      const tsdg::TsdgGraph layer =
          tsdg::build_navigating_layer(b, tsdg::MatrixView{rows, n, dim}, m, diversify, params->seed, control);
      copy_graph_out(layer, params->degree, ids, lambdas);
    });
  });
}

TsdgStatus tsdg_exact_knn(TsdgBackend* backend, const float* base, int64_t nb,
                          const float* queries, int64_t nq, int dim, TsdgMetric metric, int k,
                          uint32_t* ids, float* dists, TsdgError* error) {
  return guarded(error, [&] {
    validate_rows(base, nb, dim);
    validate_rows(queries, nq, dim);
    require(k > 0, "k must be positive");
    require(nq == 0 || (ids != nullptr && dists != nullptr), "ids and dists must not be NULL");
    const tsdg::Metric m = backend_metric(backend_of(backend), metric);
    std::unique_ptr<tsdg::ThreadPool> pool;
    if (static_cast<double>(nb) * nq * dim > kParallelScanWork) pool = std::make_unique<tsdg::ThreadPool>(0);
    tsdg::RunControl control;
    control.pool = pool.get();
    backend_of(backend).exact_knn(tsdg::MatrixView{base, nb, dim},
                                  tsdg::MatrixView{queries, nq, dim}, m, k, ids, dists, control);
  });
}

}  // extern "C"
