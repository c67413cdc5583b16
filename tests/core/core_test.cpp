#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/cpu_info.hpp"
#include "core/fpenv.hpp"
#include "core/sha256.hpp"
#include "core/thread_pool.hpp"

namespace lockstep {
namespace {

TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const float one = 1.0f;  // 00 00 80 3f
  const unsigned char le[] = {0x00, 0x00, 0x80, 0x3f};
  EXPECT_EQ(sha256_f32_le({&one, 1}), sha256_hex(le, 4));
}

TEST(ThreadPool, EveryWorkerRunsOnceAndResultsArePartitioned) {
  ThreadPool pool(3);
  for (int n : {1, 2, 3, 7}) {  // 7 > size: the pool grows
    std::vector<int> hits(static_cast<size_t>(n), 0);
    std::vector<int> owner(1000, -1);
    pool.run(n, [&](int w, int count) {
      EXPECT_EQ(count, n);
      ++hits[static_cast<size_t>(w)];
      const auto [b, e] = static_range(1000, w, count);
      for (int64_t i = b; i < e; ++i) owner[static_cast<size_t>(i)] = w;
    });
    for (int h : hits) EXPECT_EQ(h, 1);
    for (int o : owner) EXPECT_GE(o, 0);
  }
}

TEST(ThreadPool, RethrowsAWorkersException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run(2, [](int w, int) {
    if (w == 1) throw std::runtime_error("boom");
  }), std::runtime_error);
  int ran = 0;
  pool.run(2, [&](int, int) { __atomic_add_fetch(&ran, 1, __ATOMIC_RELAXED); });
  EXPECT_EQ(ran, 2);  // still usable
}

TEST(ThreadPool, CallersOnSeveralThreadsTakeTurns) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c)
    callers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) pool.run(2, [&](int, int) { total.fetch_add(1); });
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 2);
}

TEST(ThreadPool, RunPhasesRunsEveryItemOnceAfterThePhaseBefore) {
  ThreadPool pool(2);
  for (int n : {1, 2, 3, 7}) {
    for (int round = 0; round < 20; ++round) {
      const int64_t phases = 40;
      auto items = [&](int64_t p) -> int64_t { return (p * 7 + round) % 11; };  // zero-item phases too
      std::vector<std::vector<std::atomic<int>>> hits(static_cast<size_t>(phases));
      for (int64_t p = 0; p < phases; ++p) hits[static_cast<size_t>(p)] = std::vector<std::atomic<int>>(static_cast<size_t>(items(p)));
      std::vector<std::atomic<int64_t>> done(static_cast<size_t>(phases));
      std::vector<std::atomic<int>> in_slot(static_cast<size_t>(n));
      std::atomic<int> wrong{0};
      pool.run_phases(n, phases, items, [&](int64_t p, int64_t i, int slot) {
        if (slot < 0 || slot >= n || in_slot[static_cast<size_t>(slot)].exchange(1) != 0) wrong.fetch_add(1);
        if (p > 0 && done[static_cast<size_t>(p - 1)].load() != items(p - 1)) wrong.fetch_add(1);
        hits[static_cast<size_t>(p)][static_cast<size_t>(i)].fetch_add(1);
        done[static_cast<size_t>(p)].fetch_add(1);
        if (slot >= 0 && slot < n) in_slot[static_cast<size_t>(slot)].store(0);
      });
      EXPECT_EQ(wrong.load(), 0) << "threads " << n;
      for (const auto& phase : hits)
        for (const auto& h : phase) EXPECT_EQ(h.load(), 1) << "threads " << n;
    }
  }
}

TEST(ThreadPool, RunPhasesRethrowsAndStaysUsable) {
  ThreadPool pool(3);
  std::atomic<int> after{0};
  EXPECT_THROW(pool.run_phases(3, 5, [](int64_t) -> int64_t { return 4; },
                               [&](int64_t p, int64_t i, int) {
                                 if (p == 2 && i == 1) throw std::runtime_error("boom");
                                 if (p > 2) after.fetch_add(1);
                               }),
               std::runtime_error);
  EXPECT_EQ(after.load(), 0);  // the items after the failure are skipped
  std::atomic<int> ran{0};
  pool.run_phases(3, 3, [](int64_t) -> int64_t { return 5; }, [&](int64_t, int64_t, int) { ran.fetch_add(1); });
  EXPECT_EQ(ran.load(), 15);
}

TEST(ThreadPool, RunAndRunPhasesInterleaveFromSeveralCallers) {
  // Workers that sleep through a phased job, join late or leave it must still be there for
  // the next run(), which needs every one of them.
  ThreadPool pool(2);
  std::atomic<int64_t> total{0}, expected{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 3; ++c)
    callers.emplace_back([&, c] {
      for (int i = 0; i < 300; ++i) {
        const int n = 2 + (i / 2 + c) % 2;
        expected.fetch_add(i % 2 ? n : 600);
        if (i % 2) {
          pool.run(n, [&](int, int) { total.fetch_add(1); });
        } else {
          pool.run_phases(n, 3, [](int64_t p) -> int64_t { return p + 1; },
                          [&](int64_t, int64_t, int) { total.fetch_add(100); });
        }
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), expected.load());
}

TEST(ThreadPool, RunPhasesBacksOffAfterAWorkerSlowedAJobDown) {
  // Job 1: the caller's item waits until a worker has started the other, which then takes
  // 300 ms (a worker its neighbours descheduled): the caller waited far longer than the item
  // would have taken it, so the next two jobs run on the caller alone.
  ThreadPool pool(2);
  std::atomic<bool> started{false};
  std::atomic<int> slots_seen{0};
  pool.run_phases(2, 1, [](int64_t) -> int64_t { return 2; }, [&](int64_t, int64_t, int slot) {
    slots_seen.fetch_or(1 << slot);
    if (slot != 0) {
      started.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return;
    }
    for (int i = 0; i < 10000 && !started.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  ASSERT_EQ(slots_seen.load(), 3) << "both the caller and a worker ran an item";
  for (int job = 0; job < 2; ++job) {
    std::atomic<int> other{0};
    pool.run_phases(2, 3, [](int64_t) -> int64_t { return 8; }, [&](int64_t, int64_t, int slot) {
      if (slot != 0) other.fetch_add(1);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    EXPECT_EQ(other.load(), 0) << "job " << job << " after the slow one ran on the caller alone";
  }
}

TEST(Barrier, SeparatesPhases) {
  ThreadPool pool(3);
  for (int n : {2, 3, 5}) {
    Barrier barrier(n);
    std::vector<int> stage(static_cast<size_t>(n), 0);
    std::atomic<int> wrong{0};
    pool.run(n, [&](int w, int count) {
      for (int phase = 1; phase <= 50; ++phase) {
        stage[static_cast<size_t>(w)] = phase;
        barrier.wait();
        for (int o = 0; o < count; ++o)
          if (stage[static_cast<size_t>(o)] != phase) wrong.fetch_add(1);
        barrier.wait();
      }
    });
    EXPECT_EQ(wrong.load(), 0);
  }
}

TEST(StaticRange, CoversEverythingInOrder) {
  for (int n = 1; n <= 9; ++n) {
    int64_t next = 0;
    for (int w = 0; w < n; ++w) {
      const auto [b, e] = static_range(23, w, n);
      EXPECT_EQ(b, next);
      EXPECT_GE(e - b, 23 / n);
      EXPECT_LE(e - b, 23 / n + 1);
      next = e;
    }
    EXPECT_EQ(next, 23);
  }
}

TEST(FloatEnv, ScopeClearsFlushToZeroAndRestoresTheCallers) {
  const uint64_t original = float_env_bits();
  float_env_set_fast_math_for_test();
  const uint64_t fast = float_env_bits();
  volatile float tiny = 1e-38f;
  volatile float scale = 1e-3f;
  EXPECT_EQ(tiny * scale, 0.0f) << "flush-to-zero should be on for this check";
  {
    FloatEnvScope scope;
    EXPECT_GT(tiny * scale, 0.0f) << "the profile needs subnormals";
  }
  EXPECT_EQ(float_env_bits(), fast);
  float_env_restore_for_test(original);
  EXPECT_GT(tiny * scale, 0.0f);
}

TEST(CpuInfo, AtLeastOneCore) { EXPECT_GE(physical_cores_available(), 1); }

}  // namespace
}  // namespace lockstep
