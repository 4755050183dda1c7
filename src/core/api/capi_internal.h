// What the files of the C interface (capi*.cpp) share: the handles that
// cross them, the turning of exceptions into a TsdgStatus, argument checks,
// and the settings of the resident-index searches.
#pragma once

#include <cstdint>
#include <memory>

#include "backend.h"
#include "search.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

struct TsdgBackend {
  std::unique_ptr<tsdg::Backend> backend;
};

struct TsdgResidentIndex {
  std::unique_ptr<tsdg::SearchIndex> index;
  std::unique_ptr<tsdg::ThreadPool> pool;  // CPU: created at the first large batch
  bool on_cpu = false;
  int dim = 0;
};

namespace tsdg::detail {

using tsdg::Error;
using tsdg::Status;

// Query batches at least this large are spread over a thread pool.
constexpr int64_t kParallelSearchBatch = 32;
// Brute-force scans of more than this many multiply-adds (base rows *
// queries * dim) run on a thread pool; smaller ones (the pending rows of one
// query) stay on the calling thread.
constexpr double kParallelScanWork = 1e8;
// The entry points and d_nn1+ of graphs larger than this are computed on a
// thread pool.
constexpr int64_t kParallelSummaryNodes = 100000;

void set_message(TsdgError* error, const char* message);
TsdgStatus to_status(Status status);
// The status of the exception being handled; call only inside a catch block.
TsdgStatus status_of_current_exception(TsdgError* error);

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

void require(bool condition, const char* message);
// A C caller may pass any int as a metric; it is read as an int, since a C++
// load of an enum outside its range of values is undefined.
tsdg::Metric to_metric(const TsdgMetric& metric);
tsdg::Backend& backend_of(TsdgBackend* backend);
// to_metric for a call on backend: Error(InvalidArgument) where the backend
// does not compute the metric.
tsdg::Metric backend_metric(const tsdg::Backend& backend, const TsdgMetric& metric);
void validate_rows(const float* rows, int64_t n, int dim);

tsdg::SearchParams resident_search_params(int k, int ef, int lambda_limit);
// The CPU searches large batches on a pool of its own, made at the first one.
tsdg::RunControl resident_search_control(TsdgResidentIndex* index, int64_t nq);
// A resident index's look-up of rows of its own by their vectors: the CPU's
// walks, and the entry points, on host threads (a pool of its own in
// own_pool when the index has none).
tsdg::RunControl own_rows_control(TsdgResidentIndex* index, int64_t rows,
                                  std::unique_ptr<tsdg::ThreadPool>& own_pool);

}  // namespace tsdg::detail
