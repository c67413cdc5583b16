#include "core/thread_pool.hpp"

#include <algorithm>

#include "core/fpenv.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_PAUSE() _mm_pause()
#else
#define LOCKSTEP_PAUSE() std::this_thread::yield()
#endif

namespace lockstep {
namespace {

// Spin this many rounds before blocking: long enough to catch the next parallel region of the
// same forward pass (microseconds apart), short enough that idle workers sleep when the machine
// has fewer cores than threads.
constexpr int kSpinRounds = 4096;

template <typename T, typename Pred>
void spin_then_wait(const std::atomic<T>& a, T seen, Pred done) {
  for (int i = 0; i < kSpinRounds; ++i) {
    if (done()) return;
    if (i < kSpinRounds / 2) {
      LOCKSTEP_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  while (!done()) {
    a.wait(seen, std::memory_order_acquire);
    seen = a.load(std::memory_order_acquire);
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) : size_(std::max(1, threads)) {
  threads_.reserve(static_cast<size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this, i] { worker_loop(i, 0); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  state_.fetch_add(uint64_t{1} << 16, std::memory_order_acq_rel);
  state_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker_loop(int index, uint64_t seen) {
  for (;;) {
    spin_then_wait(state_, seen, [&] { return state_.load(std::memory_order_acquire) != seen; });
    seen = state_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    // A participant's job cannot be replaced before it reports done, so job_ is this epoch's.
    const int n = static_cast<int>(seen & 0xffff);
    if (index >= n) continue;
    try {
      FloatEnvScope env;
      (*job_)(index, n);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(int threads, FunctionRef<void(int, int)> fn) {
  const int n = std::clamp(threads, 1, 1024);
  if (n == 1) {
    FloatEnvScope env;
    fn(0, 1);
    return;
  }
  std::lock_guard lock(run_mutex_);
  while (static_cast<int>(threads_.size()) + 1 < n) {
    const int index = static_cast<int>(threads_.size()) + 1;
    const uint64_t now = state_.load(std::memory_order_acquire);
    threads_.emplace_back([this, index, now] { worker_loop(index, now); });
  }
  job_ = &fn;
  error_ = nullptr;
  pending_.store(n - 1, std::memory_order_release);
  const uint64_t epoch = (state_.load(std::memory_order_relaxed) >> 16) + 1;
  state_.store((epoch << 16) | static_cast<uint64_t>(n), std::memory_order_release);
  state_.notify_all();
  std::exception_ptr own;
  try {
    FloatEnvScope env;
    fn(0, n);
  } catch (...) {
    own = std::current_exception();
  }
  int left = pending_.load(std::memory_order_acquire);
  spin_then_wait(pending_, left, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  job_ = nullptr;
  if (own) std::rethrow_exception(own);
  if (error_) std::rethrow_exception(error_);
}

void Barrier::wait() {
  if (n_ <= 1) return;
  const uint32_t generation = generation_.load(std::memory_order_acquire);
  if (arrived_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    arrived_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_acq_rel);
    generation_.notify_all();
    return;
  }
  spin_then_wait(generation_, generation,
                 [&] { return generation_.load(std::memory_order_acquire) != generation; });
}

}  // namespace lockstep
