// A fixed set of worker threads for data-parallel loops. Results are
// deterministic for a fixed seed and thread count because parallel_for hands
// out fixed chunks and callers derive per-chunk seeds from the chunk index.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "run_control.h"

namespace tsdg {

class ThreadPool {
 public:
  // threads <= 0: std::thread::hardware_concurrency()
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Calls body(begin, end, worker) over [0, count) in chunks of chunk items,
  // worker in [0, size()). Blocks until all chunks are done. Stops handing out
  // chunks once control.cancelled(), then throws Error(Status::Cancelled). An
  // exception from body is rethrown here after the loop drains.
  void parallel_for(int64_t count, int64_t chunk,
                    const std::function<void(int64_t begin, int64_t end, int worker)>& body,
                    const RunControl& control);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// parallel_for on control.pool, or inline on the calling thread (worker 0)
// when control.pool is null.
void parallel_for(const RunControl& control, int64_t count, int64_t chunk,
                  const std::function<void(int64_t begin, int64_t end, int worker)>& body);
int worker_count(const RunControl& control);

}  // namespace tsdg
