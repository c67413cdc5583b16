// One request's jobs take at most half the engine's batch (GenerationEngine::max_per_request):
// another request's job is admitted while they run, with the tokens it gets alone; and a full
// queue's Retry-After comes from the batch's state.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "lockstep/config.hpp"
#include "lockstep/generator.hpp"
#include "serve/engine_fixture.hpp"
#include "serve/generation_engine.hpp"

namespace lockstep::serve {
namespace {

using test::options;
using test::tiny_model;

struct Watch {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int32_t> tokens;  // of the short job
  std::optional<Finish> end;    // of the short job
  int endless_tokens = 0;
};

TEST(GenerationEngineShare, ARequestHoldsAtMostHalfTheBatchAndAnotherGetsIn) {
  const auto model = tiny_model();
  const std::vector<int32_t> prompt = {5, 6, 7};
  Metrics metrics;
  Watch w;  // before the engine: its jobs' callbacks use it until the engine ends
  GenerationEngine engine(4, 16, {}, metrics);
  ASSERT_EQ(engine.max_per_request(), 2u);
  const uint64_t big = engine.new_request(), small = engine.new_request();
  ASSERT_NE(big, small);
  std::vector<std::shared_ptr<GenerationJob>> endless;
  for (uint64_t i = 0; i < 6; ++i) {  // more than the whole batch, and endless
    auto job = std::make_shared<GenerationJob>();
    job->generator = std::make_unique<Generator>(model, prompt, options(i, 1 << 30));
    job->max_tokens = 1 << 30;
    job->request = big;
    job->on_token = [&w](int32_t, std::span<const float>) {
      std::lock_guard lock(w.mutex);
      ++w.endless_tokens;
      w.cv.notify_all();
    };
    job->on_done = [](Finish, const std::string&) {};
    ASSERT_TRUE(engine.submit(job));
    endless.push_back(job);
  }
  // The jobs are admitted as the engine steps, so the first may run alone for a while when this
  // thread is descheduled between two submits (a loaded machine did): wait until two run, then
  // for 100 more tokens, by which time every queued job would have been admitted were it allowed.
  const auto admitted_by = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (metrics.running.load() < 2 && std::chrono::steady_clock::now() < admitted_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    std::unique_lock lock(w.mutex);
    const int seen = w.endless_tokens;
    ASSERT_TRUE(w.cv.wait_for(lock, std::chrono::seconds(30), [&] { return w.endless_tokens >= seen + 100; }));
  }
  EXPECT_EQ(metrics.running.load(), 2) << "one request took more (or less) than its share of the batch";
  auto job = std::make_shared<GenerationJob>();
  job->generator = std::make_unique<Generator>(model, prompt, options(9, 50));
  job->max_tokens = 50;
  job->request = small;
  job->on_token = [&w](int32_t t, std::span<const float>) {
    std::lock_guard lock(w.mutex);
    w.tokens.push_back(t);
  };
  job->on_done = [&w](Finish f, const std::string&) {
    std::lock_guard lock(w.mutex);
    w.end = f;
    w.cv.notify_all();
  };
  ASSERT_TRUE(engine.submit(job));
  {
    std::unique_lock lock(w.mutex);
    ASSERT_TRUE(w.cv.wait_for(lock, std::chrono::seconds(30), [&] { return w.end.has_value(); }));
  }
  EXPECT_EQ(*w.end, Finish::length);
  Generator alone(model, prompt, options(9, 50));
  std::vector<int32_t> expected;
  while (auto t = alone.next()) expected.push_back(*t);
  EXPECT_EQ(w.tokens, expected);
  // Its jobs have about 2^30 tokens to go: a place frees in far more than a second. The estimate
  // is the last step's: the step that ended the short job still counted its few tokens left, so
  // wait (bounded) for a step of the endless jobs alone.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (engine.retry_after_seconds() <= 1 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GT(engine.retry_after_seconds(), 1);
  engine.abort_all();
}

}  // namespace
}  // namespace lockstep::serve
