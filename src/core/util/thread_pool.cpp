#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tsdg {

namespace {
// The pool whose worker runs on this thread, so that a nested parallel_for
// runs inline instead of waiting for itself.
thread_local const ThreadPool* current_pool = nullptr;
thread_local int current_worker = 0;
}  // namespace

// One loop at a time: the caller publishes a Job, wakes the workers, works on
// it as worker 0, and waits until every worker has left the job.
struct ThreadPool::State {
  struct Job {
    int64_t count = 0;
    int64_t chunk = 1;
    int64_t chunks = 0;
    const std::function<void(int64_t, int64_t, int)>* body = nullptr;
    const RunControl* control = nullptr;
    std::atomic<int64_t> next_chunk{0};
    std::atomic<bool> stop{false};
    std::exception_ptr error;
    std::mutex error_mutex;
  };

  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable wake;
  std::condition_variable finished;
  Job* job = nullptr;
  uint64_t generation = 0;
  int busy_workers = 0;
  bool shutting_down = false;
  std::mutex caller_mutex;  // serializes parallel_for calls from different threads

  void run_chunks(Job& job, int worker) {
    while (!job.stop.load(std::memory_order_relaxed)) {
      if (job.control->cancelled()) {
        job.stop.store(true, std::memory_order_relaxed);
        break;
      }
      const int64_t c = job.next_chunk.fetch_add(1, std::memory_order_relaxed);
      if (c >= job.chunks) break;
      const int64_t begin = c * job.chunk;
      const int64_t end = std::min(job.count, begin + job.chunk);
      try {
        (*job.body)(begin, end, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(job.error_mutex);
        if (!job.error) job.error = std::current_exception();
        job.stop.store(true, std::memory_order_relaxed);
      }
    }
  }

  void worker_loop(const ThreadPool* pool, int worker) {
    current_pool = pool;
    current_worker = worker;
    uint64_t seen = 0;
    for (;;) {
      Job* current;
      {
        std::unique_lock<std::mutex> lock(mutex);
        wake.wait(lock, [&] { return shutting_down || generation != seen; });
        if (shutting_down) return;
        seen = generation;
        current = job;
      }
      run_chunks(*current, worker);
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (--busy_workers == 0) finished.notify_all();
      }
    }
  }
};

ThreadPool::ThreadPool(int threads) : state_(std::make_unique<State>()) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // The calling thread is worker 0, so threads - 1 are started.
  for (int w = 1; w < threads; ++w) {
    state_->threads.emplace_back([this, w] { state_->worker_loop(this, w); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->shutting_down = true;
  }
  state_->wake.notify_all();
  for (auto& t : state_->threads) t.join();
}

int ThreadPool::size() const { return static_cast<int>(state_->threads.size()) + 1; }

void ThreadPool::parallel_for(int64_t count, int64_t chunk,
                              const std::function<void(int64_t, int64_t, int)>& body,
                              const RunControl& control) {
  control.throw_if_cancelled();
  if (count <= 0) return;
  if (chunk <= 0) chunk = std::max<int64_t>(1, count / (static_cast<int64_t>(size()) * 8));

  State::Job job;
  job.count = count;
  job.chunk = chunk;
  job.chunks = (count + chunk - 1) / chunk;
  job.body = &body;
  job.control = &control;

  if (current_pool == this || size() == 1 || job.chunks == 1) {
    // Nested call from one of our workers, or nothing to share: run inline.
    state_->run_chunks(job, current_pool == this ? current_worker : 0);
  } else {
    std::lock_guard<std::mutex> caller(state_->caller_mutex);
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      state_->job = &job;
      state_->busy_workers = static_cast<int>(state_->threads.size());
      ++state_->generation;
    }
    state_->wake.notify_all();
    const ThreadPool* outer_pool = current_pool;
    current_pool = this;
    current_worker = 0;
    state_->run_chunks(job, 0);
    current_pool = outer_pool;
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->finished.wait(lock, [&] { return state_->busy_workers == 0; });
    state_->job = nullptr;
  }
  if (job.error) std::rethrow_exception(job.error);
  control.throw_if_cancelled();
}

void parallel_for(const RunControl& control, int64_t count, int64_t chunk,
                  const std::function<void(int64_t, int64_t, int)>& body) {
  if (control.pool != nullptr) {
    control.pool->parallel_for(count, chunk, body, control);
    return;
  }
  control.throw_if_cancelled();
  if (chunk <= 0) chunk = std::max<int64_t>(1, count);
  for (int64_t begin = 0; begin < count; begin += chunk) {
    control.throw_if_cancelled();
    body(begin, std::min(count, begin + chunk), 0);
  }
}

int worker_count(const RunControl& control) {
  return control.pool != nullptr ? control.pool->size() : 1;
}

}  // namespace tsdg
