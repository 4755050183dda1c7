// What every long-running core or backend call receives: the threads it may use
// and the flag that tells it to stop. Algorithms poll cancelled() at least every
// few milliseconds of work and throw Error(Status::Cancelled) when it is set.
#pragma once

#include <atomic>

#include "types.h"

namespace tsdg {

class ThreadPool;

// The step a multi-step call is in (RunControl::set_phase); the values are
// the C API's TsdgBuildPhase. Link: a merge writes its search lists out, in
// row order, as its progress counts them, then links the graph's components,
// which may still change a few (merge.h).
enum class Phase : int { KnnGraph = 1, Diversify = 2, Merge = 3, Link = 5 };

struct RunControl {
  ThreadPool* pool = nullptr;                   // nullptr: run on the calling thread
  const std::atomic<bool>* cancel = nullptr;    // set by the caller on interrupt
  std::atomic<int64_t>* progress_done = nullptr;   // optional: work units finished
  std::atomic<int64_t>* progress_total = nullptr;  // optional: work units planned
  std::atomic<int>* phase = nullptr;               // optional: the step running (Phase)
  // optional: asks whoever polls the phase and progress (the C API's poll
  // loop) to poll at once, not at its next poll; called on every phase change
  void (*poll_now)(void* arg) = nullptr;
  void* poll_now_arg = nullptr;

  bool cancelled() const { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }
  void throw_if_cancelled() const {
    if (cancelled()) throw Error(Status::Cancelled, "cancelled");
  }
  void set_total(int64_t total) const {
    if (progress_total) progress_total->store(total, std::memory_order_relaxed);
    if (progress_done) progress_done->store(0, std::memory_order_relaxed);
  }
  // Release: what the units counted wrote (a merge's search lists, merge.h)
  // is seen by whoever reads the count.
  void add_done(int64_t units) const {
    if (progress_done) progress_done->fetch_add(units, std::memory_order_release);
  }
  // This control for the steps after a phase whose count the caller reads
  // (Link's lists written out): their own counts would reset it.
  RunControl without_progress() const {
    RunControl quiet = *this;
    quiet.progress_done = nullptr;
    quiet.progress_total = nullptr;
    return quiet;
  }
  // Release: what the step before wrote (a merge's k-NN lists, merge.h) is
  // seen by whoever reads the new phase; set_total before it is seen too.
  void set_phase(Phase step) const {
    if (phase) phase->store(static_cast<int>(step), std::memory_order_release);
    wake_poll();
  }
  void wake_poll() const {
    if (poll_now) poll_now(poll_now_arg);
  }
};

}  // namespace tsdg
