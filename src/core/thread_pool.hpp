// The worker threads a model computes on: created once, reused by every call, work split along
// independent outputs (never inside a reduction), statically or handed out while running, so
// the bits never depend on how many threads ran or which took what.
#pragma once

#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace lockstep {

// A non-owning reference to a callable, cheaper than std::function on the hot path.
template <typename Signature>
class FunctionRef;
template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, FunctionRef>>>
  FunctionRef(F&& f) noexcept  // NOLINT: implicit by design
      : object_(const_cast<void*>(static_cast<const void*>(&f))),
        call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}
  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

class ThreadPool {
 public:
  // `threads` participants in all, the calling thread included (so threads - 1 workers).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Participants the pool was made for; run() may add workers beyond it on request.
  int size() const { return size_; }

  // Runs fn(worker, n) for every worker in [0, n), worker 0 on the calling thread, each under the
  // profile's floating-point environment, and returns when all are done. A pool with fewer
  // workers than n - 1 starts more first (threads beyond the cores are allowed: tests run 7 on
  // 2 cores). The first exception a worker throws is rethrown here. Calls from several threads
  // take turns.
  void run(int threads, FunctionRef<void(int, int)> fn);

 private:
  void worker_loop(int index, uint64_t seen);

  int size_;
  std::vector<std::thread> threads_;
  std::mutex run_mutex_;  // one job at a time
  // (epoch << 16) | participants, published in one store so that a worker never pairs one job's
  // epoch with another job's participant count.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const FunctionRef<void(int, int)>* job_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

// A reusable barrier for the n workers of one ThreadPool::run job: they spin briefly, then block.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void wait();

 private:
  int n_;
  std::atomic<int> arrived_{0};
  std::atomic<uint32_t> generation_{0};
};

// [begin, end) of `total` items for worker w of n: contiguous, sizes differing by at most one.
inline std::pair<int64_t, int64_t> static_range(int64_t total, int w, int n) {
  const int64_t base = total / n, extra = total % n;
  const int64_t begin = w * base + (w < extra ? w : extra);
  return {begin, begin + base + (w < extra ? 1 : 0)};
}

}  // namespace lockstep
