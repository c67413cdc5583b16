#include "core/thread_pool.hpp"

#include <algorithm>
#include <chrono>
#include <climits>

#include "core/fpenv.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOCKSTEP_PAUSE() _mm_pause()
#else
#define LOCKSTEP_PAUSE() std::this_thread::yield()
#endif

namespace lockstep {
namespace {

// How long a waiting thread spins before it sleeps on a futex. Long enough to catch the next
// phase of a forward pass on an idle machine (phases are microseconds apart), short enough that
// a thread whose partner was descheduled, or shares its core, gives the core up at once: the
// old policy (4096 rounds of pause, then yield, about 0.1-1 ms) cost that much per barrier
// whenever the two threads of a 2-thread call shared a core, 40 barriers per decoded token.
constexpr int32_t kSpinUs = 5;
constexpr auto kSpin = std::chrono::microseconds(kSpinUs);
// wait_phase's spin adapts per slot between kSpinUs and kPhaseSpinUs: a wait that ends within the
// spin doubles it (up to kPhaseSpinUs), one that had to sleep sets it back to kSpinUs. With both
// threads running, a phase often ends 5-50 us after a thread's share (decode's phases are that
// short, and their shares uneven), and a worker that sleeps leaves the job, so the caller ran
// the next phases alone until it woke: l768 Q8_0 decode on 2 threads went 347-368 -> 446-462
// tokens/s with 50 us (prefill unchanged). A partner descheduled or sharing the core makes waits
// sleep, and the spin short again, as before.
constexpr int32_t kPhaseSpinUs = 50;

constexpr uint64_t kOpen = uint64_t{1} << 31;
constexpr uint64_t kMembers = kOpen - 1;
constexpr uint64_t kPhased = uint64_t{1} << 15;
constexpr uint64_t kThreadsMask = kPhased - 1;

// Spins while !done() for up to how_long; returns done().
template <typename Pred>
bool spin(Pred done, std::chrono::microseconds how_long = kSpin) {
  const auto until = std::chrono::steady_clock::now() + how_long;
  for (;;) {
    for (int i = 0; i < 32; ++i) {
      if (done()) return true;
      LOCKSTEP_PAUSE();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

template <typename T, typename Pred>
void spin_then_wait(const std::atomic<T>& a, T seen, Pred done) {
  if (spin(done)) return;
  while (!done()) {
    a.wait(seen, std::memory_order_acquire);
    seen = a.load(std::memory_order_acquire);
  }
}

}  // namespace

constexpr int kMaxThreads = 1024;
constexpr int64_t kNone = INT64_MAX;

ThreadPool::ThreadPool(int threads)
    : size_(std::max(1, threads)),
      awaits_(std::make_unique<std::atomic<int64_t>[]>(kMaxThreads)),
      spin_us_(std::make_unique<std::atomic<int32_t>[]>(kMaxThreads)) {
  for (int i = 0; i < kMaxThreads; ++i) awaits_[i].store(kNone, std::memory_order_relaxed);
  for (int i = 0; i < kMaxThreads; ++i) spin_us_[i].store(kSpinUs, std::memory_order_relaxed);
  threads_.reserve(static_cast<size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) threads_.emplace_back([this, i] { worker_loop(i, 0); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  state_.fetch_add(uint64_t{1} << 16, std::memory_order_acq_rel);
  state_.notify_all();
  progress_.fetch_add(1, std::memory_order_seq_cst);
  progress_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker_loop(int index, uint64_t seen) {
  for (;;) {
    spin_then_wait(state_, seen, [&] { return state_.load(std::memory_order_acquire) != seen; });
    seen = state_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    const int n = static_cast<int>(seen & kThreadsMask);
    if (index >= n) continue;
    if (seen & kPhased) {
      // Only while the job is open: a worker that wakes after its caller finished takes no part.
      const auto serial = static_cast<uint32_t>(seen >> 16);
      if (join(serial)) drive(index, false, serial);
      continue;
    }
    // A participant's job cannot be replaced before it reports done, so job_ is this epoch's.
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

void ThreadPool::ensure_workers(int n) {
  while (static_cast<int>(threads_.size()) + 1 < n) {
    const int index = static_cast<int>(threads_.size()) + 1;
    const uint64_t now = state_.load(std::memory_order_acquire);
    threads_.emplace_back([this, index, now] { worker_loop(index, now); });
  }
}

void ThreadPool::run(int threads, FunctionRef<void(int, int)> fn) {
  const int n = std::clamp(threads, 1, kMaxThreads);
  if (n == 1) {
    FloatEnvScope env;
    fn(0, 1);
    return;
  }
  std::lock_guard lock(run_mutex_);
  ensure_workers(n);
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

bool ThreadPool::join(uint32_t serial) {
  uint64_t v = members_.load(std::memory_order_acquire);
  do {
    if (static_cast<uint32_t>(v >> 32) != serial || !(v & kOpen)) return false;
  } while (!members_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel, std::memory_order_acquire));
  return true;
}

void ThreadPool::leave() {
  const uint64_t v = members_.fetch_sub(1, std::memory_order_acq_rel);
  if (!(v & kOpen) && (v & kMembers) == 1) members_.notify_all();
}

void ThreadPool::phase_complete(int64_t p) {
  progress_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) == 0) return;
  for (int s = 0; s < phase_threads_; ++s)
    if (awaits_[s].load(std::memory_order_seq_cst) <= p) {
      progress_.notify_all();
      return;
    }
}

// Waits until every item of phase p has returned (true), or, for a worker, until the job closed
// while it slept (false; it is no longer a member). A worker leaves before it sleeps, so a
// sleeping worker never holds the caller up.
bool ThreadPool::wait_phase(int64_t p, int slot, uint32_t serial) {
  const Phase& phase = phases_[p];
  const bool owner = slot == 0;
  auto complete = [&] { return phase.done.load(std::memory_order_acquire) == phase.items; };
  std::atomic<int32_t>& spin_us = spin_us_[slot];
  const int32_t us = spin_us.load(std::memory_order_relaxed);
  if (spin(complete, std::chrono::microseconds(us))) {
    if (us < kPhaseSpinUs) spin_us.store(std::min(kPhaseSpinUs, 2 * us), std::memory_order_relaxed);
    return true;
  }
  spin_us.store(kSpinUs, std::memory_order_relaxed);
  for (;;) {
    const uint32_t seen = progress_.load(std::memory_order_seq_cst);
    if (complete()) return true;
    if (!owner) leave();
    awaits_[slot].store(p, std::memory_order_seq_cst);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    progress_.wait(seen, std::memory_order_seq_cst);
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    awaits_[slot].store(kNone, std::memory_order_relaxed);
    if (!owner && !join(serial)) return false;
  }
}

// Takes and runs items of each phase in turn until the last is handed out; the owner (the
// caller, slot 0) returns when every phase is complete, a worker as soon as it has nothing to
// do. A worker skips the phases of one item (the owner's) and waits only for the phase before
// the next one it can share; one that joins late runs through the phases already handed out.
void ThreadPool::drive(int slot, bool owner, uint32_t serial, OwnerTimes* times) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
  FloatEnvScope env;
  const FunctionRef<void(int64_t, int64_t, int)>& body = *phase_body_;
  const int64_t phases = n_phases_;
  const int n = phase_threads_;
  for (int64_t p = 0; p < phases; ++p) {
    if (!owner) {
      // The next phase this worker may take part in; the ones before it are the owner's.
      while (p < phases && phases_[p].items < 2) ++p;
      if (p == phases) break;
      if (p > 0 && !wait_phase(p - 1, slot, serial)) return;
    }
    Phase& phase = phases_[p];
    const bool timed = times && phase.items > 1;
    const Clock::time_point start = timed ? Clock::now() : Clock::time_point{};
    int64_t took = 0;
    // This slot's share first, then the others' in turn.
    for (int r = 0; r < n; ++r) {
      Share& share = shares_[p * n + (slot + r) % n];
      for (int64_t i = share.next.fetch_add(1, std::memory_order_relaxed); i < share.end;
           i = share.next.fetch_add(1, std::memory_order_relaxed)) {
        if (!failed_.load(std::memory_order_relaxed)) {
          try {
            body(p, i, slot);
          } catch (...) {
            std::lock_guard lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
            failed_.store(true, std::memory_order_relaxed);
          }
        }
        ++took;
      }
    }
    if (took > 0 && phase.done.fetch_add(took, std::memory_order_acq_rel) + took == phase.items) phase_complete(p);
    if (timed) {
      const Clock::time_point end = Clock::now();
      times->busy += seconds(start, end);
      times->took += took;
      times->items += phase.items;
      if (phase.done.load(std::memory_order_acquire) != phase.items) {
        wait_phase(p, slot, serial);
        times->waited += seconds(end, Clock::now());
      }
      continue;
    }
    if (owner && !wait_phase(p, slot, serial)) return;
  }
  if (!owner) leave();
}

void ThreadPool::run_phases(int threads, int64_t phases, FunctionRef<int64_t(int64_t)> items,
                            FunctionRef<void(int64_t, int64_t, int)> body) {
  const int n = std::clamp(threads, 1, kMaxThreads);
  std::unique_lock lock(run_mutex_, std::defer_lock);
  bool shared = false;  // a phase of two or more items
  if (n > 1) {
    lock.lock();
    // No member of an earlier job is left (its caller waited for them), so the phases are ours.
    if (phase_capacity_ < phases) {
      phases_ = std::make_unique<Phase[]>(static_cast<size_t>(phases));
      phase_capacity_ = phases;
    }
    if (share_capacity_ < phases * n) {
      shares_ = std::make_unique<Share[]>(static_cast<size_t>(phases * n));
      share_capacity_ = phases * n;
    }
    for (int64_t p = 0; p < phases; ++p) {
      phases_[p].done.store(0, std::memory_order_relaxed);
      phases_[p].items = std::max<int64_t>(0, items(p));
      shared = shared || phases_[p].items > 1;
      for (int s = 0; s < n; ++s) {
        const auto [first, end] = static_range(phases_[p].items, s, n);
        shares_[p * n + s].next.store(first, std::memory_order_relaxed);
        shares_[p * n + s].end = end;
      }
    }
  }
  if (shared && solo_jobs_ > 0) {  // backing off after jobs the workers slowed down
    --solo_jobs_;
    shared = false;
  }
  if (!shared) {  // the caller alone, in order
    FloatEnvScope env;
    for (int64_t p = 0; p < phases; ++p)
      for (int64_t i = 0, end = n > 1 ? phases_[p].items : items(p); i < end; ++i) body(p, i, 0);
    return;
  }
  ensure_workers(n);
  n_phases_ = phases;
  phase_threads_ = n;
  phase_body_ = &body;
  error_ = nullptr;
  failed_.store(false, std::memory_order_relaxed);
  const uint64_t epoch = (state_.load(std::memory_order_relaxed) >> 16) + 1;
  const auto serial = static_cast<uint32_t>(epoch);
  members_.store((uint64_t{serial} << 32) | kOpen | 1, std::memory_order_release);  // the caller
  state_.store((epoch << 16) | kPhased | static_cast<uint64_t>(n), std::memory_order_release);
  state_.notify_all();
  OwnerTimes times;
  drive(0, true, serial, &times);
  // The workers' items, at the caller's pace, against what the caller spent waiting for them.
  // (A job whose shared items all went to workers says nothing of their pace.)
  if (times.took > 0) {
    const double saved = times.busy * static_cast<double>(times.items - times.took) / static_cast<double>(times.took);
    if (times.waited > saved) {
      solo_jobs_ = backoff_;
      backoff_ = std::min(backoff_ * 2, 64);
    } else {
      backoff_ = 2;
    }
  }
  // Close: no worker joins from now on; wake those asleep so they return to the idle loop, and
  // wait for the members still looking at a counter.
  members_.fetch_and(~kOpen, std::memory_order_acq_rel);
  uint64_t left = members_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  progress_.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) progress_.notify_all();
  spin_then_wait(members_, left, [&] { return (members_.load(std::memory_order_acquire) & kMembers) == 0; });
  phase_body_ = nullptr;
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
