// The C interface of tsdg_capi.h for the unreached-row checks: the rows a
// search from the entry points cannot reach, found on a job thread or on a
// resident index, their repair, and the index's entry-point summary.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "backend.h"
#include "capi_internal.h"
#include "navigating_layer.h"
#include "capi_job.h"
#include "distance.h"
#include "diversify.h"
#include "entry_points.h"
#include "ggm.h"
#include "host_memory.h"
#include "search.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

using namespace tsdg::detail;

struct TsdgUnreachedJob {
  std::unique_ptr<tsdg::RepairChecks> checks;
  JobThread thread;  // last: stopped before what it reads goes
};

namespace {

// The rows a check of the rows [first, n) and of those marked
// TSDG_CHANGED_RECHECK in recheck (n flags, may be NULL) walks, ascending.
std::vector<uint32_t> rows_to_check(int64_t first, int64_t n, const uint8_t* recheck) {
  std::vector<uint32_t> rows;
  for (int64_t u = 0; recheck != nullptr && u < first; ++u) {
    if ((recheck[u] & TSDG_CHANGED_RECHECK) != 0) rows.push_back(static_cast<uint32_t>(u));
  }
  for (int64_t u = std::max<int64_t>(first, 0); u < n; ++u) rows.push_back(static_cast<uint32_t>(u));
  return rows;
}

}  // namespace

extern "C" {

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
                                           const uint32_t* layer_ids, const uint8_t* layer_lambdas,
                                           int64_t first, const uint8_t* recheck, int ef, int lambda_limit,
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
    require(first >= 0 && first <= n, "unreached rows: rows out of range");
    require((layer_ids == nullptr) == (layer_lambdas == nullptr), "layer_ids and layer_lambdas go together");
    auto job = std::make_unique<TsdgUnreachedJob>();
    const tsdg::MatrixView data{rows, n, dim};
    std::shared_ptr<tsdg::NavigatingLayer> layer;
    const int64_t layer_nodes = tsdg::layer_node_count(n);
    if (layer_ids != nullptr && layer_nodes > 0) {
      layer = std::make_shared<tsdg::NavigatingLayer>(tsdg::gather_layer_rows(data).view(),
                                                      tsdg::GraphView{layer_ids, layer_lambdas, layer_nodes, degree},
                                                      to_metric(metric));
    }
    // A record's vector may hold twice the nodes it keeps.
    job->checks = std::make_unique<tsdg::RepairChecks>(
        data, tsdg::GraphView{neighbors, lambdas, n, degree}, to_metric(metric), entry_ids, entry_count,
        rows_to_check(first, n, recheck), ef, lambda_limit, record_bytes / (2 * static_cast<int64_t>(sizeof(uint32_t))),
        layer);
    TsdgUnreachedJob* running = job.get();
    job->thread.start(0, [running](const tsdg::RunControl& control) { running->checks->run(control); });
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
    job->thread.rethrow_failure();
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
    job->thread.rethrow_failure();
    tsdg::RunControl control;
    control.pool = job->thread.pool();
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
    require(first >= 0 && first <= n, "unreached rows: rows out of range");
    std::vector<uint32_t> repaired;
    std::vector<uint32_t> also = rows_to_check(first, n, changed);
    also.resize(also.size() - static_cast<size_t>(n - first));  // the range is the index's own check
    const std::vector<uint32_t> after = tsdg::unreached_rows_repaired(
        *index->index, tsdg::MatrixView{rows, n, index->dim}, tsdg::GraphSpan{neighbors, lambdas, n, degree},
        to_metric(metric), resident_search_params(1, ef, lambda_limit), first, n, *found, repaired, control,
        marking_repaired(changed), also);
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
