// The C interface of tsdg_capi.h for the search profile of a graph held in
// memory (profile.h), on a job thread, so that an index build writes its
// pages while the searches run.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "capi_internal.h"
#include "profile.h"
#include "thread_pool.h"
#include "tsdg_capi.h"

using namespace tsdg::detail;

struct TsdgProfileJob {
  tsdg::SearchProfileInput input;
  std::unique_ptr<tsdg::ThreadPool> pool;
  std::atomic<bool> cancel{false};
  std::thread thread;
  std::vector<int64_t> scored;
  double seconds = 0.0;
  std::exception_ptr failure;
};

namespace {

// One core stays with the caller, who writes its pages meanwhile; more
// threads than samples would have nothing to do.
int profile_threads(int samples) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, std::min(samples, cores - 1));
}

}  // namespace

extern "C" {

TsdgProfileJob* tsdg_profile_job_start(const float* rows, int64_t n, int dim, TsdgMetric metric,
                                       const uint32_t* neighbors, const uint8_t* lambdas, int degree,
                                       int lambda_limit, const uint32_t* navigating, int navigating_count,
                                       const uint32_t* samples, int sample_count, int first_ef, int steps,
                                       TsdgError* error) {
  try {
    validate_rows(rows, n, dim);
    require(degree > 0, "degree must be positive");
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    require(lambda_limit >= 0, "lambda_limit must not be negative");
    require(navigating_count >= 0 && (navigating_count == 0 || navigating != nullptr),
            "navigating must not be NULL");
    require(sample_count >= 0 && (sample_count == 0 || samples != nullptr), "samples must not be NULL");
    require(first_ef > 0 && steps >= 0 && steps < 24, "first_ef must be positive and steps in [0, 24)");
    auto job = std::make_unique<TsdgProfileJob>();
    job->input.data = tsdg::MatrixView{rows, n, dim};
    job->input.graph = tsdg::GraphView{neighbors, lambdas, n, degree};
    job->input.metric = to_metric(metric);
    job->input.lambda_limit = lambda_limit;
    job->input.navigating.assign(navigating, navigating + navigating_count);
    job->input.samples.assign(samples, samples + sample_count);
    for (int step = 0; step < steps; ++step) job->input.efs.push_back(first_ef << step);
    job->pool = std::make_unique<tsdg::ThreadPool>(profile_threads(sample_count));
    TsdgProfileJob* running = job.get();
    job->thread = std::thread([running] {
      const auto start = std::chrono::steady_clock::now();
      try {
        tsdg::RunControl control;
        control.pool = running->pool.get();
        control.cancel = &running->cancel;
        running->scored = tsdg::search_profile(running->input, control);
      } catch (...) {
        running->failure = std::current_exception();
      }
      running->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    });
    set_message(error, "");
    return job.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

TsdgStatus tsdg_profile_job_finish(TsdgProfileJob* job, int64_t* scored, double* seconds, TsdgError* error) {
  std::unique_ptr<TsdgProfileJob> owned(job);
  if (job != nullptr) job->thread.join();
  return guarded(error, [&] {
    require(job != nullptr, "job must not be NULL");
    require(job->input.efs.empty() || scored != nullptr, "scored must not be NULL");
    require(seconds != nullptr, "seconds must not be NULL");
    *seconds = job->seconds;
    if (job->failure) std::rethrow_exception(job->failure);
    std::copy(job->scored.begin(), job->scored.end(), scored);
  });
}

void tsdg_profile_job_cancel(TsdgProfileJob* job) {
  std::unique_ptr<TsdgProfileJob> owned(job);
  if (job == nullptr) return;
  job->cancel.store(true, std::memory_order_relaxed);
  job->thread.join();
}

}  // extern "C"
