#include "capi_job.h"

#include <chrono>
#include <utility>

namespace tsdg::detail {

JobThread::~JobThread() { cancel(); }

void JobThread::start(int threads, std::function<void(const RunControl&)> body) {
  pool_ = std::make_unique<ThreadPool>(threads);
  thread_ = std::thread([this, body = std::move(body)] {
    const auto start = std::chrono::steady_clock::now();
    try {
      RunControl control;
      control.pool = pool_.get();
      control.cancel = &cancel_;
      body(control);
    } catch (...) {
      failure_ = std::current_exception();
    }
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    done_.store(true, std::memory_order_release);
  });
}

void JobThread::join() {
  if (thread_.joinable()) thread_.join();
}

void JobThread::cancel() {
  cancel_.store(true, std::memory_order_relaxed);
  join();
}

void JobThread::rethrow_failure() const {
  if (failure_) std::rethrow_exception(failure_);
}

}  // namespace tsdg::detail
