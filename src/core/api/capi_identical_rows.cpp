// The C interface of tsdg_capi.h for the groups of identical rows
// (identical_rows.h), on a job thread, so that an index build writes its row
// pages while they are found.
#include <algorithm>
#include <memory>
#include <thread>

#include "capi_internal.h"
#include "capi_job.h"
#include "identical_rows.h"
#include "tsdg_capi.h"

using namespace tsdg::detail;

struct TsdgIdenticalRowsJob {
  tsdg::MatrixView rows;
  tsdg::IdenticalRowGroups groups;
  JobThread thread;  // last: stopped before what it reads goes
};

namespace {

// One core stays with the caller, who writes its pages meanwhile.
int identical_rows_threads() {
  return static_cast<int>(std::max(2u, std::thread::hardware_concurrency()) - 1);
}

}  // namespace

extern "C" {

TsdgIdenticalRowsJob* tsdg_identical_rows_job_start(const float* rows, int64_t n, int dim, TsdgError* error) {
  try {
    validate_rows(rows, n, dim);
    auto job = std::make_unique<TsdgIdenticalRowsJob>();
    job->rows = tsdg::MatrixView{rows, n, dim};
    TsdgIdenticalRowsJob* running = job.get();
    job->thread.start(identical_rows_threads(), [running](const tsdg::RunControl& control) {
      running->groups = tsdg::find_identical_rows(running->rows, control);
    });
    set_message(error, "");
    return job.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

bool tsdg_identical_rows_job_done(const TsdgIdenticalRowsJob* job) {
  return job == nullptr || job->thread.done();
}

TsdgStatus tsdg_identical_rows_job_wait(TsdgIdenticalRowsJob* job, int64_t* groups, int64_t* group_rows,
                                        double* seconds, TsdgError* error) {
  if (job != nullptr) job->thread.join();
  const TsdgStatus status = guarded(error, [&] {
    require(job != nullptr, "job must not be NULL");
    require(groups != nullptr && group_rows != nullptr && seconds != nullptr,
            "groups, group_rows and seconds must not be NULL");
    *seconds = job->thread.seconds();
    job->thread.rethrow_failure();
    *groups = static_cast<int64_t>(job->groups.ends.size());
    *group_rows = static_cast<int64_t>(job->groups.ids.size());
  });
  if (status != TSDG_OK) delete job;
  return status;
}

void tsdg_identical_rows_job_take(TsdgIdenticalRowsJob* job, uint32_t* ids, int64_t* ends) {
  std::unique_ptr<TsdgIdenticalRowsJob> owned(job);
  if (job == nullptr) return;
  job->thread.join();
  std::copy(job->groups.ids.begin(), job->groups.ids.end(), ids);
  std::copy(job->groups.ends.begin(), job->groups.ends.end(), ends);
}

void tsdg_identical_rows_job_cancel(TsdgIdenticalRowsJob* job) {
  std::unique_ptr<TsdgIdenticalRowsJob> owned(job);
  if (job != nullptr) job->thread.cancel();
}

}  // extern "C"
