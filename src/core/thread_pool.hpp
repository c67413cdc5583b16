// The worker threads a model computes on: created once, reused by every call, work split along
// independent outputs (never inside a reduction), statically or handed out while running, so
// the bits never depend on how many threads ran or which took what.
//
// On a shared machine a worker can be descheduled for a whole time slice (milliseconds) at any
// moment. Two kinds of job: run() needs every worker (static shares, Barrier), so a descheduled
// worker stalls the others; run_phases() hands each participant its own share of a phase's items
// first and then the others' to whoever asks, and never waits for a worker that holds no item,
// so the caller alone can finish the job when its helpers are late.
// Waiting threads spin only a few microseconds (a phase's wait up to 50 while its waits keep
// ending within the spin, thread_pool.cpp), then sleep on a futex (std::atomic::wait): a core
// whose thread sleeps goes idle, and the kernel can move a waiting thread onto it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
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

  // Runs `phases` phases in order: phase p has items(p) independent items (items is called once
  // per phase, on the calling thread, before any runs), and body(p, item, slot) runs exactly
  // once for each, every item of phase p starting after every item of phase p - 1 has returned.
  // Items go to whichever participant asks next: the calling thread (slot 0) and each worker
  // 1..threads-1 that wakes while the job is open, so a slot runs on one thread at a time and
  // per-slot scratch is private. Each phase's items are cut into `threads` contiguous shares
  // (static_range): slot s takes the items of share s first, then helps with the others' (s + 1,
  // s + 2, ...). On a quiet machine a slot so runs the same part of every phase (the same rows of
  // a forward pass), and the data one phase wrote is in its own core's caches when the next reads
  // it; a slot that is late or descheduled leaves its share to the others. A phase of one item runs on the calling thread (its data is
  // there; a worker would only add a hand-over), and a job without a phase of two or more items
  // wakes no worker. Returns when every item has returned; it never waits for a worker that
  // holds no item (one that is descheduled, or wakes late, simply takes none). A worker that
  // holds one while its core runs someone else still stalls the phase, so the caller keeps
  // count: when it waited on the workers longer than their items would have taken it (a machine
  // busier than its cores), the next 2, then 4, ... up to 64 jobs run on the caller alone before
  // the workers are tried again. The first exception a body throws is rethrown here, after the
  // remaining items are skipped.
  void run_phases(int threads, int64_t phases, FunctionRef<int64_t(int64_t)> items,
                  FunctionRef<void(int64_t, int64_t, int)> body);

 private:
  struct Phase {
    int64_t items = 0;
    alignas(64) std::atomic<int64_t> done{0};  // items returned
  };
  // One slot's share of a phase's items: [first, end), handed out from `next`.
  struct alignas(64) Share {
    std::atomic<int64_t> next{0};
    int64_t end = 0;
  };
  void worker_loop(int index, uint64_t seen);
  void ensure_workers(int n);
  bool join(uint32_t serial);
  void leave();
  // What the caller saw of a job: its time on the items of shared phases (phases of two or more
  // items), how many of those items it ran and there were, and its time waiting for others.
  struct OwnerTimes {
    double busy = 0, waited = 0;
    int64_t took = 0, items = 0;
  };
  void drive(int slot, bool owner, uint32_t serial, OwnerTimes* times = nullptr);
  bool wait_phase(int64_t p, int slot, uint32_t serial);
  void phase_complete(int64_t p);

  int size_;
  std::vector<std::thread> threads_;
  std::mutex run_mutex_;  // one job at a time
  // (epoch << 16) | (phased << 15) | participants, published in one store so that a worker never
  // pairs one job's epoch with another job's participant count or kind.
  std::atomic<uint64_t> state_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  const FunctionRef<void(int, int)>* job_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
  // run_phases: the job's phases (grown under run_mutex_ while no job is open), its body, and
  // who takes part: (serial << 32) | open bit | members, where members are the threads that may
  // read the job right now. A worker joins only an open job of the serial it woke for, and
  // leaves before it sleeps; the caller closes the job when every phase is complete and waits
  // only for the members (threads between two looks at a counter) to leave.
  std::unique_ptr<Phase[]> phases_;
  int64_t phase_capacity_ = 0;
  std::unique_ptr<Share[]> shares_;  // phase p's share s at p * phase_threads_ + s
  int64_t share_capacity_ = 0;
  int64_t n_phases_ = 0;
  int phase_threads_ = 0;
  int solo_jobs_ = 0;  // jobs left to run on the caller alone
  int backoff_ = 2;    // how many the next unhelpful job sets
  const FunctionRef<void(int64_t, int64_t, int)>* phase_body_ = nullptr;
  std::atomic<uint64_t> members_{0};
  std::atomic<uint32_t> progress_{0};  // bumped at each phase's completion and at each close
  std::atomic<int> sleepers_{0};       // threads asleep on progress_
  // Per slot, the phase whose completion it sleeps for (INT64_MAX: none): a completion wakes
  // the sleepers only when one of them waits for it or an earlier phase.
  std::unique_ptr<std::atomic<int64_t>[]> awaits_;
  // Per slot, how many microseconds wait_phase spins before it sleeps (thread_pool.cpp, kPhaseSpinUs).
  std::unique_ptr<std::atomic<int32_t>[]> spin_us_;
  std::atomic<bool> failed_{false};
};

// A reusable barrier for the n workers of one ThreadPool::run job: they spin a few microseconds,
// then block.
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
