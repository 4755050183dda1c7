// The thread of a job of the C interface (tsdg_profile_job_*,
// tsdg_identical_rows_job_*, tsdg_unreached_job_*): a computation run on a
// thread of its own over a pool of threads, so that the caller writes its
// pages meanwhile, then joins it.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <thread>

#include "run_control.h"
#include "thread_pool.h"

namespace tsdg::detail {

class JobThread {
 public:
  JobThread() = default;
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;
  // Stops and joins a job still running, so that nothing it reads goes first.
  ~JobThread();

  // Runs body on a new thread, with a pool of threads (<= 0: one per core)
  // and the job's cancel flag in its RunControl; what body throws is kept.
  void start(int threads, std::function<void(const RunControl&)> body);
  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits for the thread (nothing once joined).
  void join();
  // Asks the body to stop, then joins.
  void cancel();
  // After join: rethrows what the body threw.
  void rethrow_failure() const;
  // After join: how long the body ran.
  double seconds() const { return seconds_; }
  // The job's threads, for more work of the caller's once joined.
  ThreadPool* pool() const { return pool_.get(); }

 private:
  std::unique_ptr<ThreadPool> pool_;
  std::atomic<bool> cancel_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
  double seconds_ = 0.0;
  std::exception_ptr failure_;
};

}  // namespace tsdg::detail
