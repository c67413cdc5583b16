// Continuous batching gives every generation the tokens it gets alone (Generator::next), whatever
// runs with it, and a cancelled generation leaves with finish "abort".
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "lockstep/config.hpp"
#include "lockstep/generator.hpp"
#include "serve/generation_engine.hpp"

namespace lockstep::serve {
namespace {

std::shared_ptr<const Model> tiny_model() {
  ModelConfig c;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_ff = 32;
  c.length = 32;
  return Model::from_parameters(c, init_parameters(c, 7));
}

GenerateOptions options(uint64_t seed, int32_t tokens) {
  GenerateOptions g;
  g.sampling = {0.9f, 40, 1.0f, seed};
  g.max_tokens = tokens;
  return g;
}

TEST(GenerationEngine, BatchedTokensEqualSoloTokens) {
  const auto model = tiny_model();
  constexpr int jobs = 24;
  std::vector<std::vector<int32_t>> solo(jobs), batched(jobs);
  std::vector<std::vector<int32_t>> prompts(jobs);
  for (int i = 0; i < jobs; ++i) {
    for (int k = 0; k <= i % 9; ++k) prompts[i].push_back(40 + i + k);
    Generator g(model, prompts[i], options(100 + i, 20 + 3 * i));  // past the window for most
    while (auto t = g.next()) solo[i].push_back(*t);
  }
  Metrics metrics;
  std::mutex mutex;
  std::condition_variable cv;
  int done = 0;
  {
    GenerationEngine engine(64, 64, {}, metrics);
    for (int i = 0; i < jobs; ++i) {
      auto job = std::make_shared<GenerationJob>();
      job->generator = std::make_unique<Generator>(model, prompts[i], options(100 + i, 20 + 3 * i));
      job->max_tokens = 20 + 3 * i;
      job->on_token = [&, i](int32_t t, std::span<const float>) { batched[i].push_back(t); };
      job->on_done = [&](Finish f, const std::string&) {
        EXPECT_EQ(f, Finish::length);
        std::lock_guard lock(mutex);
        ++done;
        cv.notify_all();
      };
      ASSERT_TRUE(engine.submit(job));
    }
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done == jobs; }));
  }
  EXPECT_EQ(batched, solo);
}

TEST(GenerationEngine, CancelledJobsLeaveWithAbort) {
  const auto model = tiny_model();
  Metrics metrics;
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<Finish> finish;
  GenerationEngine engine(4, 4, {}, metrics);
  auto job = std::make_shared<GenerationJob>();
  const std::vector<int32_t> prompt = {1, 2, 3};
  job->generator = std::make_unique<Generator>(model, prompt, options(1, 1 << 30));
  job->max_tokens = 1 << 30;
  job->on_token = [](int32_t, std::span<const float>) {};
  job->on_done = [&](Finish f, const std::string&) {
    std::lock_guard lock(mutex);
    finish = f;
    cv.notify_all();
  };
  ASSERT_TRUE(engine.submit(job));
  job->cancelled.store(true);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return finish.has_value(); }));
  EXPECT_EQ(*finish, Finish::abort);
}

}  // namespace
}  // namespace lockstep::serve
