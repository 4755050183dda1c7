// The C interface of tsdg_capi.h for the search profile of a graph held in
// memory (profile.h), on a job thread, so that an index build writes its
// pages while the searches run.
#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "capi_internal.h"
#include "capi_job.h"
#include "navigating_layer.h"
#include "profile.h"
#include "tsdg_capi.h"

using namespace tsdg::detail;

struct TsdgProfileJob {
  std::unique_ptr<tsdg::NavigatingLayer> layer;
  tsdg::SearchProfileInput input;
  tsdg::SearchProfile profile;
  JobThread thread;  // last: stopped before what it reads goes
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
                                       const uint32_t* layer_ids, const uint8_t* layer_lambdas,
                                       int64_t layer_nodes, const uint32_t* samples, int sample_count,
                                       int first_ef, int steps, TsdgError* error) {
  try {
    validate_rows(rows, n, dim);
    require(degree > 0, "degree must be positive");
    require(n == 0 || (neighbors != nullptr && lambdas != nullptr),
            "neighbors and lambdas must not be NULL");
    require(lambda_limit >= 0, "lambda_limit must not be negative");
    require(navigating_count >= 0 && (navigating_count == 0 || navigating != nullptr),
            "navigating must not be NULL");
    require(layer_nodes == 0 || layer_nodes == tsdg::layer_node_count(n),
            "layer_nodes must be 0 or tsdg_layer_node_count(n)");
    require(layer_nodes == 0 || (layer_ids != nullptr && layer_lambdas != nullptr),
            "layer_ids and layer_lambdas must not be NULL");
    require(sample_count >= 0 && (sample_count == 0 || samples != nullptr), "samples must not be NULL");
    require(first_ef > 0 && steps >= 0 && steps < 24, "first_ef must be positive and steps in [0, 24)");
    auto job = std::make_unique<TsdgProfileJob>();
    job->input.data = tsdg::MatrixView{rows, n, dim};
    job->input.graph = tsdg::GraphView{neighbors, lambdas, n, degree};
    job->input.metric = to_metric(metric);
    job->input.lambda_limit = lambda_limit;
    job->input.navigating.assign(navigating, navigating + navigating_count);
    if (layer_nodes > 0) {
      const tsdg::Matrix layer_rows = tsdg::gather_layer_rows(job->input.data);
      job->layer = std::make_unique<tsdg::NavigatingLayer>(
          layer_rows.view(), tsdg::GraphView{layer_ids, layer_lambdas, layer_nodes, degree}, job->input.metric);
      job->input.layer = job->layer.get();
    }
    job->input.samples.assign(samples, samples + sample_count);
    for (int step = 0; step < steps; ++step) job->input.efs.push_back(first_ef << step);
    TsdgProfileJob* running = job.get();
    job->thread.start(profile_threads(sample_count), [running](const tsdg::RunControl& control) {
      running->profile = tsdg::search_profile(running->input, control);
    });
    set_message(error, "");
    return job.release();
  } catch (...) {
    status_of_current_exception(error);
    return nullptr;
  }
}

TsdgStatus tsdg_profile_job_finish(TsdgProfileJob* job, int64_t* scored, int64_t* layer_scored, double* seconds,
                                   TsdgError* error) {
  std::unique_ptr<TsdgProfileJob> owned(job);
  if (job != nullptr) job->thread.join();
  return guarded(error, [&] {
    require(job != nullptr, "job must not be NULL");
    require(job->input.efs.empty() || (scored != nullptr && layer_scored != nullptr),
            "scored and layer_scored must not be NULL");
    require(seconds != nullptr, "seconds must not be NULL");
    *seconds = job->thread.seconds();
    job->thread.rethrow_failure();
    std::copy(job->profile.scored.begin(), job->profile.scored.end(), scored);
    std::copy(job->profile.layer_scored.begin(), job->profile.layer_scored.end(), layer_scored);
  });
}

void tsdg_profile_job_cancel(TsdgProfileJob* job) {
  std::unique_ptr<TsdgProfileJob> owned(job);
  if (job != nullptr) job->thread.cancel();
}

}  // extern "C"
