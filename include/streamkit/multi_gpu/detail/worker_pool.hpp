#pragma once
// The dispatcher's host threads (see multi_gpu/dispatcher.hpp).

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

namespace streamkit::detail {

/// Threads that live as long as their owner and run one job at a time: run(count, job) calls
/// job(0) on the calling thread and job(1) … job(count − 1) on the pool's threads, then waits for all.
/// `job` must not throw. A run allocates nothing (the job is referred to, not copied into a
/// std::function), so that loops of runs allocate nothing; runs do not nest.
class worker_pool {
 public:
  explicit worker_pool(std::size_t threads)
  {
    for (std::size_t k = 1; k <= threads; ++k) { threads_.emplace_back([this, k] { serve(k); }); }
  }
  worker_pool(worker_pool const&) = delete;
  worker_pool& operator=(worker_pool const&) = delete;
  ~worker_pool()
  {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& thread : threads_) { thread.join(); }
  }

  /// Threads of the pool, the caller's not counted.
  [[nodiscard]] std::size_t size() const noexcept { return threads_.size(); }

  template <class Job>
  void run(std::size_t count, Job const& job)
  {
    run_erased(count, &job, [](void const* erased, std::size_t index) { (*static_cast<Job const*>(erased))(index); });
  }

 private:
  using job_call = void (*)(void const* job, std::size_t index);

  void run_erased(std::size_t count, void const* job, job_call call)
  {
    if (count == 0) { return; }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = job, call_ = call;
      active_ = std::min(count, threads_.size() + 1);
      remaining_ = active_ - 1;
      ++generation_;
    }
    wake_.notify_all();
    call(job, 0);
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [this] { return remaining_ == 0; });
    job_ = nullptr;
  }

  void serve(std::size_t index)
  {
    std::size_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) { return; }
      seen = generation_;
      if (index >= active_) { continue; }  // not needed in this run
      void const* const job = job_;
      job_call const call = call_;
      lock.unlock();
      call(job, index);
      lock.lock();
      if (--remaining_ == 0) { finished_.notify_all(); }
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  void const* job_ = nullptr;   // the current run's job, called through call_
  job_call call_ = nullptr;
  std::size_t active_ = 0;      // jobs of the current run, the caller's included
  std::size_t remaining_ = 0;   // the pool's jobs of the current run still running
  std::size_t generation_ = 0;  // runs so far
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};
}  // namespace streamkit::detail
