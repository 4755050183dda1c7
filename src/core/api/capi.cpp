// The C interface of tsdg_capi.h (all but the distance kernels, which live
// with them in distance.cpp). No exception leaves this file: every entry point
// catches and turns it into a TsdgStatus and message. Long operations run on a
// worker thread while the calling thread polls the caller every 50 ms.
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <limits>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "backend.h"
#include "distance.h"
#include "diversify.h"
#include "entry_points.h"
#include "ggm.h"
#include "host_memory.h"
#include "search.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

struct TsdgBackend {
  std::unique_ptr<tsdg::Backend> backend;
};

struct TsdgUnreachedJob {
  std::unique_ptr<tsdg::RepairChecks> checks;
  std::unique_ptr<tsdg::ThreadPool> pool;
  std::thread thread;
  std::exception_ptr failure;
};

struct TsdgResidentIndex {
  std::unique_ptr<tsdg::SearchIndex> index;
  std::unique_ptr<tsdg::ThreadPool> pool;  // CPU: created at the first large batch
  bool on_cpu = false;
  int dim = 0;
};

struct TsdgExactSet {
  std::unique_ptr<tsdg::ExactSet> set;
  std::unique_ptr<tsdg::ThreadPool> pool;  // CPU: created at the first large search
  bool on_cpu = false;
  int dim = 0;
};

struct TsdgSearch {
  TsdgSearch(int lambda_limit, float slack) : search(lambda_limit, slack) {}
  tsdg::GraphSearch search;
  TsdgStatus status = TSDG_OK;
  char message[TSDG_ERROR_MESSAGE_LEN] = {0};
};

static_assert(tsdg::kRepairNarrowEf == TSDG_REPAIR_NARROW_EF, "the C API names the core's narrow repair ef");
static_assert(static_cast<int>(tsdg::Phase::KnnGraph) == TSDG_PHASE_KNN_GRAPH &&
                  static_cast<int>(tsdg::Phase::Diversify) == TSDG_PHASE_DIVERSIFY &&
                  static_cast<int>(tsdg::Phase::Merge) == TSDG_PHASE_MERGE &&
                  static_cast<int>(tsdg::Phase::Link) == TSDG_PHASE_LINK,
              "tsdg::Phase follows TsdgBuildPhase");

namespace {

using tsdg::Error;
using tsdg::Status;

// Below this many rows the k-NN graph is computed exactly: it is cheap, and
// GNND needs lists that can be filled from more rows than k.
constexpr int64_t kExactGraphRows = 4096;
// A merge's batch graph (it only seeds GGM) is exact up to this many rows:
// cheaper than GNND there, whose iterations rarely reach the update-rate
// stop on so few rows.
constexpr int64_t kExactBatchGraphRows = 16384;
// Query batches at least this large are spread over a thread pool.
constexpr int64_t kParallelSearchBatch = 32;
// Brute-force scans of more than this many multiply-adds (base rows *
// queries * dim) run on a thread pool; smaller ones (the pending rows of one
// query) stay on the calling thread.
constexpr double kParallelScanWork = 1e8;
// The entry points and d_nn1+ of graphs larger than this are computed on a
// thread pool.
constexpr int64_t kParallelSummaryNodes = 100000;
constexpr auto kPollInterval = std::chrono::milliseconds(50);
// A merge's copy of the old rows runs beside the new rows' GNND and the
// uploads, which it would slow whatever its threads if it mapped its pages
// ahead: the mapping holds the mmap lock that device allocations wait for. So it maps
// them as it writes; it has until the component linking, a second later.
constexpr int kBackgroundCopyThreads = 4;

void set_message(TsdgError* error, const char* message) {
  if (error == nullptr) return;
  std::snprintf(error->message, sizeof(error->message), "%s", message);
}

TsdgStatus to_status(Status status) {
  switch (status) {
    case Status::Ok: return TSDG_OK;
    case Status::OutOfMemory: return TSDG_ERR_OUT_OF_MEMORY;
    case Status::Cancelled: return TSDG_ERR_CANCELLED;
    case Status::InvalidArgument: return TSDG_ERR_INVALID_ARGUMENT;
    case Status::DeviceError: return TSDG_ERR_DEVICE;
    case Status::Internal: return TSDG_ERR_INTERNAL;
  }
  return TSDG_ERR_INTERNAL;
}

// The status of the exception being handled; call only inside a catch block.
TsdgStatus status_of_current_exception(TsdgError* error) {
  try {
    throw;
  } catch (const Error& e) {
    set_message(error, e.what());
    return to_status(e.status());
  } catch (const std::bad_alloc&) {
    set_message(error, "out of memory");
    return TSDG_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_message(error, e.what());
    return TSDG_ERR_INTERNAL;
  } catch (...) {
    set_message(error, "unknown internal error");
    return TSDG_ERR_INTERNAL;
  }
}

template <class Body>
TsdgStatus guarded(TsdgError* error, Body body) {
  try {
    body();
    set_message(error, "");
    return TSDG_OK;
  } catch (...) {
    return status_of_current_exception(error);
  }
}

void require(bool condition, const char* message) {
  if (!condition) throw Error(Status::InvalidArgument, message);
}

// A C caller may pass any int as a metric; it is read as an int, since a C++
// load of an enum outside its range of values is undefined.
tsdg::Metric to_metric(const TsdgMetric& metric) {
  int value = 0;
  static_assert(sizeof(value) == sizeof(metric), "TsdgMetric is an int");
  std::memcpy(&value, &metric, sizeof(value));
  switch (value) {
    case TSDG_METRIC_L2: return tsdg::Metric::L2;
    case TSDG_METRIC_INNER_PRODUCT: return tsdg::Metric::InnerProduct;
    case TSDG_METRIC_COSINE: return tsdg::Metric::Cosine;
  }
  throw Error(Status::InvalidArgument, "unknown metric " + std::to_string(value));
}

tsdg::Backend& backend_of(TsdgBackend* backend) {
  if (backend != nullptr) return *backend->backend;
  static const std::unique_ptr<tsdg::Backend> cpu = tsdg::make_cpu_backend();
  return *cpu;
}

void validate_rows(const float* rows, int64_t n, int dim) {
  require(n >= 0, "row count must not be negative");
  require(dim > 0, "dimension must be positive");
  require(n == 0 || rows != nullptr, "rows must not be NULL");
  require(n < static_cast<int64_t>(TSDG_INVALID_ID), "too many rows for 32-bit ids");
}

void validate_build_params(const TsdgBuildParams* params) {
  require(params != nullptr, "build parameters must not be NULL");
  require(params->degree > 0, "degree must be positive");
  require(params->build_k > 0, "build_k must be positive");
  require(params->samples > 0, "samples must be positive");
  require(params->iterations > 0, "iterations must be positive");
  require(params->alpha >= 1.0f, "alpha must be >= 1");
  require(params->lambda0 >= 0 && params->lambda0 <= TSDG_LAMBDA0_MAX,
          ("lambda0 must be in [0, " + std::to_string(TSDG_LAMBDA0_MAX) + "]").c_str());
}

tsdg::GnndParams gnnd_params(const TsdgBuildParams& params) {
  tsdg::GnndParams gnnd;
  gnnd.k = params.build_k;
  gnnd.samples = params.samples;
  gnnd.iterations = params.iterations;
  gnnd.seed = params.seed;
  return gnnd;
}

tsdg::DiversifyParams diversify_params(const TsdgBuildParams& params) {
  tsdg::DiversifyParams diversify;
  diversify.degree = params.degree;
  diversify.alpha = params.alpha;
  diversify.lambda0 = params.lambda0;
  return diversify;
}

// The exact k-NN graph through the backend's brute force (self excluded,
// padded when there are fewer than k other rows).
tsdg::KnnGraph exact_graph(tsdg::Backend& backend, tsdg::MatrixView data, tsdg::Metric metric,
                           int k, const tsdg::RunControl& control) {
  tsdg::KnnGraph graph(data.rows, k);
  if (data.rows == 0) return graph;
  const int width = static_cast<int>(std::min<int64_t>(k + 1, data.rows));
  std::vector<uint32_t> ids(static_cast<size_t>(data.rows) * width);
  std::vector<float> dists(ids.size());
  backend.exact_knn(data, data, metric, width, ids.data(), dists.data(), control);
  for (int64_t row = 0; row < data.rows; ++row) {
    int out = 0;
    for (int j = 0; j < width && out < k; ++j) {
      const uint32_t id = ids[row * width + j];
      if (id == row || id == tsdg::kInvalidId) continue;
      graph.ids[row * k + out] = id;
      graph.dists[row * k + out] = dists[row * width + j];
      ++out;
    }
  }
  return graph;
}

bool wants_exact_graph(tsdg::MatrixView data, const tsdg::GnndParams& params) {
  return data.rows <= std::max<int64_t>(kExactGraphRows, 4 * int64_t{params.k});
}

tsdg::KnnGraph knn_graph(tsdg::Backend& backend, tsdg::MatrixView data, tsdg::Metric metric,
                         const tsdg::GnndParams& params, const tsdg::RunControl& control) {
  if (wants_exact_graph(data, params)) return exact_graph(backend, data, metric, params.k, control);
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

// Runs a step of the search; a failure (out of memory) ends the search, and
// tsdg_search_status reports it.
template <class Step>
void search_step(TsdgSearch* search, Step step) {
  if (search->status != TSDG_OK) return;
  TsdgError error;
  try {
    step();
    return;
  } catch (...) {
    search->status = status_of_current_exception(&error);
  }
  std::memcpy(search->message, error.message, sizeof(search->message));
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

}  // namespace

extern "C" {

// ---- backends ----

TsdgBackend* tsdg_backend_load(const char* shared_object_path, int device, TsdgError* error) {
  try {
    require(shared_object_path != nullptr, "shared object path must not be NULL");
    // The object stays loaded for the life of the process: unloading the CUDA
    // runtime it links statically is not safe while its exit handlers remain.
    void* handle = dlopen(shared_object_path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* reason = dlerror();
      throw Error(Status::DeviceError, std::string("cannot load the GPU backend: ") +
                                           (reason ? reason : shared_object_path));
    }
    auto create = reinterpret_cast<TsdgCreateBackendFn>(dlsym(handle, "tsdg_cuda_create_backend"));
    if (create == nullptr) {
      dlclose(handle);
      throw Error(Status::DeviceError, std::string(shared_object_path) +
                                           " does not export tsdg_cuda_create_backend");
    }
    char message[TSDG_ERROR_MESSAGE_LEN] = {0};
    tsdg::Backend* backend = create(device, message, sizeof(message));
    if (backend == nullptr) {
      throw Error(Status::DeviceError,
                  message[0] != '\0' ? message : "the GPU backend found no usable device");
    }
    auto wrapper = std::make_unique<TsdgBackend>();
    wrapper->backend.reset(backend);
    set_message(error, "");
    return wrapper.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

void tsdg_backend_free(TsdgBackend* backend) { delete backend; }

const char* tsdg_backend_name(const TsdgBackend* backend) {
  return backend_of(const_cast<TsdgBackend*>(backend)).name();
}

TsdgStatus tsdg_backend_pin_host_memory(TsdgBackend* backend, void* address, size_t bytes,
                                        TsdgError* error) {
  return guarded(error, [&] {
    require(address != nullptr && bytes > 0, "the memory to pin must not be empty");
    backend_of(backend).pin_host_memory(address, bytes);
  });
}

TsdgStatus tsdg_backend_unpin_host_memory(TsdgBackend* backend, void* address, TsdgError* error) {
  return guarded(error, [&] {
    require(address != nullptr, "the memory to unpin must not be NULL");
    backend_of(backend).unpin_host_memory(address);
  });
}

// ---- build and merge ----

void tsdg_build_params_default(TsdgBuildParams* params) {
  const tsdg::GnndParams gnnd;
  const tsdg::DiversifyParams diversify;
  params->degree = diversify.degree;
  params->build_k = gnnd.k;
  params->samples = gnnd.samples;
  params->iterations = gnnd.iterations;
  params->alpha = diversify.alpha;
  params->lambda0 = diversify.lambda0;
  params->seed = gnnd.seed;
  params->threads = 0;
}

TsdgStatus tsdg_build_graph(TsdgBackend* backend, const float* rows, int64_t n, int dim,
                            TsdgMetric metric, const TsdgBuildParams* params, uint32_t* neighbors,
                            uint8_t* lambdas, uint32_t* knn_ids, float* knn_dists, TsdgPollFn poll,
                            void* poll_arg, TsdgError* error) {
  return guarded(error, [&] {
    validate_rows(rows, n, dim);
    validate_build_params(params);
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    const tsdg::Metric m = to_metric(metric);
    tsdg::Backend& b = backend_of(backend);
    const tsdg::MatrixView data{rows, n, dim};
    const tsdg::GnndParams gnnd = gnnd_params(*params);
    const tsdg::DiversifyParams diversify = diversify_params(*params);
    run_polled(params->threads, poll, poll_arg,
               [&](const tsdg::RunControl& control, std::atomic<int>& phase) {
                 tsdg::TsdgGraph graph;
                 if (wants_exact_graph(data, gnnd)) {
                   const tsdg::KnnGraph knn = exact_graph(b, data, m, gnnd.k, control);
                   copy_knn_out(knn, params->build_k, knn_ids, knn_dists);
                   phase.store(TSDG_PHASE_DIVERSIFY);
                   graph = b.diversify(data, m, knn, diversify, control);
                 } else {
                   graph = b.build_tsdg_graph(data, m, gnnd, diversify, knn_ids, knn_dists, control);
                 }
                 copy_graph_out(graph, params->degree, neighbors, lambdas);
               });
  });
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
    const tsdg::Metric m = to_metric(metric);
    tsdg::Backend& b = backend_of(backend);
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
                                        uint8_t* changed, TsdgPollFn poll, void* poll_arg,
                                        TsdgError* error) {
  return guarded(error, [&] {
    require(n_old >= 0 && n_new >= 0, "row counts must not be negative");
    const int64_t n = n_old + n_new;
    validate_rows(rows, n, dim);
    validate_build_params(params);
    require(n_old == 0 || (old_knn_ids != nullptr && old_neighbors != nullptr && old_lambdas != nullptr),
            "the old k-NN graph and search graph must not be NULL");
    require(n == 0 || (knn_ids != nullptr && neighbors != nullptr && lambdas != nullptr &&
                       changed != nullptr),
            "output arrays must not be NULL");
    const tsdg::Metric m = to_metric(metric);
    tsdg::Backend& b = backend_of(backend);
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
                     n_new <= kExactBatchGraphRows ? exact_graph(b, batch, m, gnnd.k, control)
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
                 in.old_rebuilt = old_changed;
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
                 for (int64_t u = 0; u < n; ++u) {
                   changed[u] = static_cast<uint8_t>((knn_change[u] ? TSDG_CHANGED_KNN : 0) |
                                                     (search_changed[u] ? TSDG_CHANGED_GRAPH : 0) |
                                                     (relinked[u] ? TSDG_CHANGED_LINK : 0));
                 }
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
    const tsdg::Metric m = to_metric(metric);
    std::unique_ptr<tsdg::ThreadPool> pool;
    if (static_cast<double>(nb) * nq * dim > kParallelScanWork) pool = std::make_unique<tsdg::ThreadPool>(0);
    tsdg::RunControl control;
    control.pool = pool.get();
    backend_of(backend).exact_knn(tsdg::MatrixView{base, nb, dim},
                                  tsdg::MatrixView{queries, nq, dim}, m, k, ids, dists, control);
  });
}

// ---- resident indexes ----

TsdgResidentIndex* tsdg_index_upload(TsdgBackend* backend, const float* rows, int64_t n, int dim,
                                     TsdgMetric metric, const uint32_t* neighbors,
                                     const uint8_t* lambdas, int degree, TsdgError* error) {
  return tsdg_index_upload_after(backend, nullptr, rows, n, dim, metric, neighbors, lambdas, degree,
                                 error);
}

TsdgResidentIndex* tsdg_index_upload_after(TsdgBackend* backend, const TsdgResidentIndex* same_rows,
                                           const float* rows, int64_t n, int dim,
                                           TsdgMetric metric, const uint32_t* neighbors,
                                           const uint8_t* lambdas, int degree, TsdgError* error) {
  try {
    validate_rows(rows, n, dim);
    require(degree > 0, "degree must be positive");
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    const tsdg::Metric m = to_metric(metric);
    const tsdg::MatrixView data{rows, n, dim};
    auto index = std::make_unique<TsdgResidentIndex>();
    index->dim = dim;
    index->on_cpu = backend == nullptr;
    const tsdg::GraphView graph{neighbors, lambdas, n, degree};
    if (index->on_cpu) {
      // A GPU index checks its lists on the device, after the upload.
      const int64_t edges = n * degree;
      for (int64_t i = 0; i < edges; ++i) {
        if (neighbors[i] != TSDG_INVALID_ID && neighbors[i] >= n) {
          throw Error(Status::InvalidArgument, "neighbor id " + std::to_string(neighbors[i]) +
                                                   " out of range for " + std::to_string(n) + " nodes");
        }
      }
      index->index = std::make_unique<tsdg::CpuSearchIndex>(data, graph, m);
    } else {
      require(same_rows == nullptr || same_rows->dim == dim,
              "the index whose rows are reused has another dimension");
      index->index = backend->backend->make_search_index(
          data, graph, m, same_rows != nullptr ? same_rows->index.get() : nullptr);
    }
    set_message(error, "");
    return index.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

namespace {

tsdg::SearchParams resident_search_params(int k, int ef, int lambda_limit) {
  tsdg::SearchParams params;
  params.k = k;
  params.ef = ef;
  params.lambda_limit = lambda_limit;
  return params;
}

// The CPU searches large batches on a pool of its own, made at the first one.
tsdg::RunControl resident_search_control(TsdgResidentIndex* index, int64_t nq) {
  tsdg::RunControl control;
  if (index->on_cpu && nq >= kParallelSearchBatch) {
    if (!index->pool) index->pool = std::make_unique<tsdg::ThreadPool>(0);
    control.pool = index->pool.get();
  }
  return control;
}

// A resident index's look-up of rows of its own by their vectors: the CPU's
// walks, and the entry points, on host threads (a pool of its own in
// own_pool when the index has none).
tsdg::RunControl own_rows_control(TsdgResidentIndex* index, int64_t rows,
                                  std::unique_ptr<tsdg::ThreadPool>& own_pool) {
  tsdg::RunControl control = resident_search_control(index, rows);
  if (control.pool == nullptr && rows >= kParallelSearchBatch) {
    own_pool = std::make_unique<tsdg::ThreadPool>(0);
    control.pool = own_pool.get();
  }
  return control;
}

}  // namespace

TsdgStatus tsdg_index_search(TsdgResidentIndex* index, const float* queries, int64_t nq, int k,
                             int ef, int lambda_limit, uint32_t* ids, float* dists,
                             TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    validate_rows(queries, nq, index->dim);
    require(nq == 0 || (ids != nullptr && dists != nullptr), "ids and dists must not be NULL");
    const tsdg::RunControl control = resident_search_control(index, nq);
    index->index->search(tsdg::MatrixView{queries, nq, index->dim},
                         resident_search_params(k, ef, lambda_limit), ids, dists, control);
  });
}

TsdgStatus tsdg_index_set_payload(TsdgResidentIndex* index, const void* values, int value_size,
                                  const uint8_t* flags, uint8_t skip_bits, const void* missing,
                                  TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    index->index->set_payload(values, value_size, flags, skip_bits, missing);
  });
}

TsdgStatus tsdg_index_search_payload(TsdgResidentIndex* index, const float* queries, int64_t nq,
                                     int k, int k_out, int ef, int lambda_limit, void* values,
                                     float* dists, TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    validate_rows(queries, nq, index->dim);
    require(nq == 0 || (values != nullptr && dists != nullptr), "values and dists must not be NULL");
    if (nq == 0) return;
    const tsdg::RunControl control = resident_search_control(index, nq);
    index->index->search_payload(tsdg::MatrixView{queries, nq, index->dim},
                                 resident_search_params(k, ef, lambda_limit), k_out, values, dists,
                                 control);
  });
}

size_t tsdg_index_memory_bytes(const TsdgResidentIndex* index) {
  if (index == nullptr) return 0;
  return index->index->memory_bytes();
}

void tsdg_index_free(TsdgResidentIndex* index) { delete index; }

// ---- exact sets ----

TsdgExactSet* tsdg_exact_set_create(TsdgBackend* backend, int dim, TsdgMetric metric, TsdgError* error) {
  try {
    require(dim > 0, "dimension must be positive");
    auto set = std::make_unique<TsdgExactSet>();
    set->set = backend_of(backend).make_exact_set(dim, to_metric(metric));
    set->on_cpu = backend == nullptr;
    set->dim = dim;
    set_message(error, "");
    return set.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

TsdgStatus tsdg_exact_set_append(TsdgExactSet* set, const float* rows, int64_t n, TsdgError* error) {
  return guarded(error, [&] {
    require(set != nullptr, "exact set must not be NULL");
    validate_rows(rows, n, set->dim);
    set->set->append(tsdg::MatrixView{rows, n, set->dim}, tsdg::RunControl{});
  });
}

void tsdg_exact_set_clear(TsdgExactSet* set) {
  if (set != nullptr) set->set->clear();
}

int64_t tsdg_exact_set_size(const TsdgExactSet* set) { return set == nullptr ? 0 : set->set->size(); }

size_t tsdg_exact_set_memory_bytes(const TsdgExactSet* set) {
  return set == nullptr ? 0 : set->set->memory_bytes();
}

TsdgStatus tsdg_exact_set_search(TsdgExactSet* set, const float* queries, int64_t nq, int k,
                                 uint32_t* ids, float* dists, TsdgError* error) {
  return guarded(error, [&] {
    require(set != nullptr, "exact set must not be NULL");
    validate_rows(queries, nq, set->dim);
    require(k > 0 && k <= TSDG_EXACT_SET_MAX_K, "k must be 1 to 2048");
    require(nq == 0 || (ids != nullptr && dists != nullptr), "ids and dists must not be NULL");
    // The CPU scans large batches on a pool of its own, made at the first one.
    tsdg::RunControl control;
    if (set->on_cpu && static_cast<double>(set->set->size()) * nq * set->dim > kParallelScanWork) {
      if (!set->pool) set->pool = std::make_unique<tsdg::ThreadPool>(0);
      control.pool = set->pool.get();
    }
    set->set->search(tsdg::MatrixView{queries, nq, set->dim}, k, ids, dists, control);
  });
}

void tsdg_exact_set_free(TsdgExactSet* set) { delete set; }

// ---- incremental search ----

TsdgSearch* tsdg_search_create(int lambda_limit, float slack, TsdgError* error) {
  try {
    require(lambda_limit >= 0, "lambda_limit must not be negative");
    require(slack >= 0.0f && std::isfinite(slack), "slack must be finite and >= 0");
    auto search = std::make_unique<TsdgSearch>(lambda_limit, slack);
    set_message(error, "");
    return search.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

void tsdg_search_free(TsdgSearch* search) { delete search; }

void tsdg_search_begin(TsdgSearch* search, int ef) {
  search->status = TSDG_OK;
  search_step(search, [&] { search->search.begin(std::max(ef, 1)); });
}

void tsdg_search_widen(TsdgSearch* search, int ef) {
  search_step(search, [&] { search->search.widen(ef); });
}

void tsdg_search_offer(TsdgSearch* search, uint32_t id, float distance) {
  search_step(search, [&] { search->search.offer(id, distance); });
}

uint32_t tsdg_search_next(TsdgSearch* search) {
  if (search->status != TSDG_OK) return TSDG_INVALID_ID;
  return search->search.next();
}

int tsdg_search_unvisited(TsdgSearch* search, const uint32_t* ids, const uint8_t* lambdas,
                          int count, uint32_t* fresh) {
  int found = 0;
  search_step(search, [&] { found = search->search.unvisited(ids, lambdas, count, fresh); });
  return found;
}

int tsdg_search_results(const TsdgSearch* search, uint32_t* ids, float* dists, int max_results) {
  return search->search.results(ids, dists, max_results);
}

int64_t tsdg_search_distance_count(const TsdgSearch* search) {
  return search->search.distance_count();
}

void tsdg_search_set_slack_context(TsdgSearch* search, TsdgMetric metric, int k,
                                   float nn1_bound) {
  search_step(search, [&] { search->search.set_slack_context(to_metric(metric), k, nn1_bound); });
}

TsdgStatus tsdg_search_status(const TsdgSearch* search, TsdgError* error) {
  if (error != nullptr) std::memcpy(error->message, search->message, sizeof(error->message));
  return search->status;
}

// ---- entry points and stop-rule statistics ----

TsdgStatus tsdg_select_entry_points(const float* rows, int64_t n, int dim, TsdgMetric metric,
                                    const uint32_t* neighbors, int degree, int count,
                                    uint32_t* entry_ids, TsdgError* error) {
  return guarded(error, [&] {
    validate_rows(rows, n, dim);
    to_metric(metric);  // every metric spreads the entries by L2; only validated
    require(count >= 0, "count must not be negative");
    require(count == 0 || entry_ids != nullptr, "entry_ids must not be NULL");
    require(neighbors == nullptr || degree > 0, "degree must be positive");
    const tsdg::GraphView graph{neighbors, nullptr, neighbors ? n : 0, neighbors ? degree : 0};
    // the worker computes them after answering a merge, while the session waits
    std::unique_ptr<tsdg::ThreadPool> pool;
    tsdg::RunControl control;
    if (n > kParallelSummaryNodes) {
      pool = std::make_unique<tsdg::ThreadPool>(0);
      control.pool = pool.get();
    }
    const std::vector<uint32_t> entries =
        tsdg::select_entry_points(tsdg::MatrixView{rows, n, dim}, graph, count,
                                  tsdg::SearchParams{}.seed, control);
    std::fill(entry_ids, entry_ids + count, TSDG_INVALID_ID);
    std::copy(entries.begin(), entries.end(), entry_ids);
  });
}

TsdgStatus tsdg_graph_nn1_bound(const float* rows, int64_t n, int dim, TsdgMetric metric,
                                const uint32_t* neighbors, int degree, float* bound,
                                TsdgError* error) {
  return guarded(error, [&] {
    validate_rows(rows, n, dim);
    require(degree > 0, "degree must be positive");
    require(n == 0 || neighbors != nullptr, "neighbors must not be NULL");
    require(bound != nullptr, "bound must not be NULL");
    std::unique_ptr<tsdg::ThreadPool> pool;
    tsdg::RunControl control;
    if (n > kParallelSummaryNodes) {
      pool = std::make_unique<tsdg::ThreadPool>(0);
      control.pool = pool.get();
    }
    *bound = tsdg::graph_nn1_bound(tsdg::MatrixView{rows, n, dim},
                                   tsdg::GraphView{neighbors, nullptr, n, degree},
                                   to_metric(metric), control);
  });
}

namespace {

// Writes the first max_rows of rows to out and how many there are to *count.
void copy_unreached(const std::vector<uint32_t>& rows, uint32_t* out, int64_t max_rows,
                    int64_t* count) {
  const int64_t written = std::min<int64_t>(max_rows, static_cast<int64_t>(rows.size()));
  std::copy(rows.begin(), rows.begin() + written, out);
  *count = static_cast<int64_t>(rows.size());
}

// Marks each list a repair changes in changed[] (TSDG_CHANGED_GRAPH |
// TSDG_CHANGED_REPAIR) before the repair writes it, also when the call then
// fails or its process dies: a session that shares changed[] writes every
// marked list's page again. The fence keeps the mark's store ahead of the
// list's for such a reader in another process.
tsdg::BeforeListChange marking_repaired(uint8_t* changed) {
  return [changed](uint32_t node) {
    changed[node] |= TSDG_CHANGED_GRAPH | TSDG_CHANGED_REPAIR;
    std::atomic_thread_fence(std::memory_order_release);
  };
}

}  // namespace

TsdgUnreachedJob* tsdg_unreached_job_start(const float* rows, int64_t n, int dim, TsdgMetric metric,
                                           const uint32_t* neighbors, const uint8_t* lambdas,
                                           int degree, const uint32_t* entry_ids, int entry_count,
                                           int64_t first, int ef, int lambda_limit,
                                           int64_t record_bytes, TsdgError* error) {
  // per row and check: its walk's record (an empty vector and its heap
  // block's header once it holds nodes), its nearest node and its flag
  static_assert(2 * (sizeof(std::vector<uint32_t>) + 16 + sizeof(uint32_t) + sizeof(uint8_t)) <=
                    TSDG_UNREACHED_JOB_ROW_BYTES,
                "TSDG_UNREACHED_JOB_ROW_BYTES covers both checks' per-row state");
  try {
    validate_rows(rows, n, dim);
    require(degree > 0, "degree must be positive");
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    require(entry_count >= 0 && (entry_count == 0 || entry_ids != nullptr),
            "entry_ids must not be NULL");
    require(record_bytes >= 0, "record_bytes must not be negative");
    auto job = std::make_unique<TsdgUnreachedJob>();
    // A record's vector may hold twice the nodes it keeps.
    job->checks = std::make_unique<tsdg::RepairChecks>(
        tsdg::MatrixView{rows, n, dim}, tsdg::GraphView{neighbors, lambdas, n, degree}, to_metric(metric), entry_ids,
        entry_count, first, n, ef, lambda_limit, record_bytes / (2 * static_cast<int64_t>(sizeof(uint32_t))));
    job->pool = std::make_unique<tsdg::ThreadPool>(0);
    TsdgUnreachedJob* running = job.get();
    job->thread = std::thread([running] {
      try {
        tsdg::RunControl control;
        control.pool = running->pool.get();
        running->checks->run(control);
      } catch (...) {
        running->failure = std::current_exception();
      }
    });
    set_message(error, "");
    return job.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

TsdgStatus tsdg_unreached_job_finish(TsdgUnreachedJob* job, uint32_t* rows_out, int64_t max_rows,
                                     int64_t* count, TsdgError* error) {
  std::unique_ptr<TsdgUnreachedJob> owned(job);
  if (job != nullptr) job->thread.join();
  return guarded(error, [&] {
    require(job != nullptr, "job must not be NULL");
    require(max_rows >= 0 && (max_rows == 0 || rows_out != nullptr), "rows_out must not be NULL");
    require(count != nullptr, "count must not be NULL");
    if (job->failure) std::rethrow_exception(job->failure);
    copy_unreached(job->checks->wide->unreached(), rows_out, max_rows, count);
  });
}

TsdgStatus tsdg_unreached_job_finish_repairing(TsdgUnreachedJob* job, uint32_t* neighbors, uint8_t* lambdas,
                                               int degree, uint8_t* changed, uint32_t* rows_out,
                                               int64_t max_rows, int64_t* count, int64_t* lists_changed,
                                               TsdgError* error) {
  std::unique_ptr<TsdgUnreachedJob> owned(job);
  if (job != nullptr) job->thread.join();
  return guarded(error, [&] {
    require(job != nullptr, "job must not be NULL");
    require(max_rows >= 0 && (max_rows == 0 || rows_out != nullptr), "rows_out must not be NULL");
    require(count != nullptr && lists_changed != nullptr, "count and lists_changed must not be NULL");
    require(changed != nullptr, "changed must not be NULL");
    if (job->failure) std::rethrow_exception(job->failure);
    tsdg::RunControl control;
    control.pool = job->pool.get();
    const int64_t n = job->checks->wide->nodes();
    const std::vector<uint32_t> repaired = job->checks->repair(tsdg::GraphSpan{neighbors, lambdas, n, degree},
                                                               control, marking_repaired(changed));
    *lists_changed = static_cast<int64_t>(repaired.size());
    copy_unreached(job->checks->wide->unreached(), rows_out, max_rows, count);
  });
}

TsdgStatus tsdg_index_unreached_rows(TsdgResidentIndex* index, int64_t first, int ef,
                                     int lambda_limit, uint32_t* rows_out, int64_t max_rows,
                                     int64_t* count, TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    require(max_rows >= 0 && (max_rows == 0 || rows_out != nullptr), "rows_out must not be NULL");
    require(count != nullptr, "count must not be NULL");
    const int64_t n = index->index->node_count();
    std::unique_ptr<tsdg::ThreadPool> own_pool;
    const tsdg::RunControl control = own_rows_control(index, n - first, own_pool);
    copy_unreached(index->index->unreached_rows(first, n, resident_search_params(1, ef, lambda_limit),
                                                control),
                   rows_out, max_rows, count);
  });
}

TsdgStatus tsdg_index_unreached_rows_repaired(TsdgResidentIndex* index, const float* rows, uint32_t* neighbors,
                                              uint8_t* lambdas, int degree, TsdgMetric metric, int64_t first,
                                              int ef, int lambda_limit, uint32_t* rows_out, int64_t max_rows,
                                              int64_t* count, int64_t* found, uint8_t* changed,
                                              int64_t* lists_changed, TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    require(max_rows >= 0 && (max_rows == 0 || rows_out != nullptr), "rows_out must not be NULL");
    require(count != nullptr && found != nullptr && lists_changed != nullptr,
            "count, found and lists_changed must not be NULL");
    require(rows != nullptr && neighbors != nullptr && lambdas != nullptr && changed != nullptr,
            "rows, neighbors, lambdas and changed must not be NULL");
    require(degree > 0, "degree must be positive");
    const int64_t n = index->index->node_count();
    std::unique_ptr<tsdg::ThreadPool> own_pool;
    const tsdg::RunControl control = own_rows_control(index, n - first, own_pool);
    std::vector<uint32_t> repaired;
    const std::vector<uint32_t> after = tsdg::unreached_rows_repaired(
        *index->index, tsdg::MatrixView{rows, n, index->dim}, tsdg::GraphSpan{neighbors, lambdas, n, degree},
        to_metric(metric), resident_search_params(1, ef, lambda_limit), first, n, *found, repaired, control,
        marking_repaired(changed));
    *lists_changed = static_cast<int64_t>(repaired.size());
    copy_unreached(after, rows_out, max_rows, count);
  });
}

TsdgStatus tsdg_index_summary(TsdgResidentIndex* index, int count, uint32_t* entry_ids,
                              float* nn1_bound, TsdgError* error) {
  return guarded(error, [&] {
    require(index != nullptr, "index must not be NULL");
    require(count > 0 && entry_ids != nullptr, "entry_ids must hold count ids");
    require(nn1_bound != nullptr, "nn1_bound must not be NULL");
    std::unique_ptr<tsdg::ThreadPool> pool;
    tsdg::RunControl control;
    if (index->index->node_count() > kParallelSummaryNodes) {
      pool = std::make_unique<tsdg::ThreadPool>(0);
      control.pool = pool.get();
    }
    tsdg::SearchParams params;
    params.entry_samples = count;
    const std::vector<uint32_t> entries = index->index->entry_points(params, control);
    std::fill(entry_ids, entry_ids + count, TSDG_INVALID_ID);
    std::copy(entries.begin(), entries.begin() + std::min<size_t>(entries.size(), count), entry_ids);
    *nn1_bound = index->index->nn1_bound();
  });
}

}  // extern "C"
