// The C interface of tsdg_capi.h for backends, resident indexes, exact sets,
// the incremental search and entry points, and the helpers the other
// capi_*.cpp files share (capi_internal.h). Builds and merges are in
// capi_build.cpp, the unreached-row checks in capi_unreached.cpp, the
// distance kernels in distance.cpp. No exception leaves these files: every
// entry point catches and turns it into a TsdgStatus and message.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "backend.h"
#include "capi_internal.h"
#include "distance.h"
#include "diversify.h"
#include "entry_points.h"
#include "ggm.h"
#include "host_memory.h"
#include "search.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

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

namespace tsdg::detail {

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
    case TSDG_METRIC_L1: return tsdg::Metric::L1;
  }
  throw Error(Status::InvalidArgument, "unknown metric " + std::to_string(value));
}

tsdg::Backend& backend_of(TsdgBackend* backend) {
  if (backend != nullptr) return *backend->backend;
  static const std::unique_ptr<tsdg::Backend> cpu = tsdg::make_cpu_backend();
  return *cpu;
}

tsdg::Metric backend_metric(const tsdg::Backend& backend, const TsdgMetric& metric) {
  const tsdg::Metric m = to_metric(metric);
  if (!backend.computes(m)) {
    throw Error(Status::InvalidArgument, std::string("the ") + backend.name() + " backend does not compute " +
                                             tsdg::metric_name(m) + " distances");
  }
  return m;
}

void validate_rows(const float* rows, int64_t n, int dim) {
  require(n >= 0, "row count must not be negative");
  require(dim > 0, "dimension must be positive");
  require(n == 0 || rows != nullptr, "rows must not be NULL");
  require(n < static_cast<int64_t>(TSDG_INVALID_ID), "too many rows for 32-bit ids");
}

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

}  // namespace tsdg::detail

using namespace tsdg::detail;

namespace {

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

bool tsdg_backend_computes(const TsdgBackend* backend, TsdgMetric metric) {
  try {
    backend_metric(backend_of(const_cast<TsdgBackend*>(backend)), metric);
    return true;
  } catch (...) {
    return false;
  }
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

struct TsdgPageMapping {
  tsdg::BackgroundPopulate populate;
};

TsdgPageMapping* tsdg_map_pages_ahead(void* address, size_t bytes) {
  try {
    return new TsdgPageMapping{tsdg::BackgroundPopulate({{address, bytes}})};
  } catch (...) {
    return nullptr;
  }
}

void tsdg_map_pages_wait(TsdgPageMapping* mapping) { delete mapping; }

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
    const tsdg::Metric m = backend_metric(backend_of(backend), metric);
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
    tsdg::Backend& b = backend_of(backend);
    set->set = b.make_exact_set(dim, backend_metric(b, metric));
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

void tsdg_search_offer_many(TsdgSearch* search, const uint32_t* ids, const float* distances,
                            int64_t count) {
  search_step(search, [&] { search->search.offer_many(ids, distances, count); });
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

size_t tsdg_search_memory_bytes(const TsdgSearch* search) {
  return sizeof(TsdgSearch) + search->search.memory_bytes();
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

static_assert(TSDG_MAX_STRIDED_ENTRIES == tsdg::kMaxStridedEntries, "the C API's strided entries are the core's");

int tsdg_navigating_set(const uint32_t* entry_ids, int count, int64_t n, uint32_t* out) {
  const std::vector<uint32_t> entries = tsdg::with_strided_entries(
      std::vector<uint32_t>(entry_ids, entry_ids + std::max(count, 0)), n, tsdg::navigating_stride(n));
  std::copy(entries.begin(), entries.end(), out);
  return static_cast<int>(entries.size());
}

int64_t tsdg_strided_entry_count(int64_t n) {
  if (n <= 0) return 0;
  const int64_t stride = tsdg::navigating_stride(n);
  return (n + stride - 1) / stride;
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

}  // extern "C"
