// Continuous batching gives every generation the tokens it gets alone (Generator::next), whatever
// runs with it, and a cancelled generation leaves with finish "abort".
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "lockstep/config.hpp"
#include "lockstep/generator.hpp"
#include "model/prefix_cache_impl.hpp"
#include "serve/engine_fixture.hpp"
#include "serve/generation_engine.hpp"

namespace lockstep::serve {
namespace {

using test::options;
using test::tiny_model;

// What one generation through an engine gave: its tokens, the logits each was drawn from, one
// after another, and how it ended.
struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  Finish finish = Finish::error;
};

std::vector<std::shared_ptr<GenerationJob>> submit_all(GenerationEngine& engine, const std::shared_ptr<const Model>& model,
                                                       const std::vector<std::vector<int32_t>>& prompts,
                                                       const std::vector<GenerateOptions>& opts,
                                                       std::vector<Outcome>& outcomes, std::mutex& mutex,
                                                       std::condition_variable& cv, int& done) {
  std::vector<std::shared_ptr<GenerationJob>> jobs;
  outcomes.assign(prompts.size(), {});
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto job = std::make_shared<GenerationJob>();
    job->generator = std::make_unique<Generator>(model, prompts[i], opts[i]);
    job->max_tokens = opts[i].max_tokens;
    job->on_token = [&outcomes, i](int32_t t, std::span<const float> logits) {
      outcomes[i].tokens.push_back(t);
      outcomes[i].logits.insert(outcomes[i].logits.end(), logits.begin(), logits.end());
    };
    job->on_done = [&outcomes, &mutex, &cv, &done, i](Finish f, const std::string&) {
      std::lock_guard lock(mutex);
      outcomes[i].finish = f;
      ++done;
      cv.notify_all();
    };
    EXPECT_TRUE(engine.submit(job));
    jobs.push_back(job);
  }
  return jobs;
}

std::vector<Outcome> run_all(GenerationEngine& engine, const std::shared_ptr<const Model>& model,
                             const std::vector<std::vector<int32_t>>& prompts, const std::vector<GenerateOptions>& opts) {
  std::vector<Outcome> outcomes;
  std::mutex mutex;
  std::condition_variable cv;
  int done = 0;
  submit_all(engine, model, prompts, opts, outcomes, mutex, cv, done);
  std::unique_lock lock(mutex);
  EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done == static_cast<int>(prompts.size()); }));
  return outcomes;
}

std::vector<int32_t> solo_tokens(const std::shared_ptr<const Model>& model, const std::vector<int32_t>& prompt,
                                 const GenerateOptions& o) {
  Generator g(model, prompt, o);
  std::vector<int32_t> out;
  while (auto t = g.next()) out.push_back(*t);
  return out;
}

TEST(GenerationEngine, BatchedTokensEqualSoloTokens) {
  const auto model = tiny_model();
  constexpr int jobs = 24;
  std::vector<std::vector<int32_t>> prompts(jobs);
  std::vector<GenerateOptions> opts;
  for (int i = 0; i < jobs; ++i) {
    for (int k = 0; k <= i % 9; ++k) prompts[i].push_back(40 + i + k);
    opts.push_back(options(100 + i, 20 + 3 * i));  // past the window for most
  }
  Metrics metrics;
  GenerationEngine engine(64, 64, {}, metrics);
  const std::vector<Outcome> batched = run_all(engine, model, prompts, opts);
  for (int i = 0; i < jobs; ++i) {
    EXPECT_EQ(batched[i].finish, Finish::length) << i;
    EXPECT_EQ(batched[i].tokens, solo_tokens(model, prompts[i], opts[i])) << i;
  }
}

// Echo with logprobs: before its first token, a job with on_prompt gets the logits that predict
// each context token after the first, in chunks of prompt_chunk positions, the bits of a forward
// pass over the context (Model::logits), on the cpu or the reference device; a prompt past the
// window is scored as the window it keeps, and a one-token prompt gets one call of no rows.
TEST(GenerationEngine, PromptScoresAreTheContextsLogitsInChunks) {
  const auto model = tiny_model();
  const int64_t vocab = model->config().vocab_size;
  Metrics metrics;
  CallOptions reference;
  reference.device = Device::reference;
  GenerationEngine on_cpu(4, 4, {}, metrics), on_reference(4, 4, reference, metrics);
  for (const int prompt_length : {1, 2, 20, 40}) {
    for (const int chunk : {0, 1, 7, -1}) {  // -1: all at once on the reference device
      GenerationEngine& engine = chunk < 0 ? on_reference : on_cpu;
      std::vector<int32_t> prompt;
      for (int k = 0; k < prompt_length; ++k) prompt.push_back((37 * k + 11) % 256);
      auto job = std::make_shared<GenerationJob>();
      job->generator = std::make_unique<Generator>(model, prompt, options(3, 2));
      job->max_tokens = 2;
      job->prompt_chunk = std::max(chunk, 0);
      const std::vector<int32_t> context(job->generator->context().tokens().begin(),
                                         job->generator->context().tokens().end());
      std::vector<float> scores;
      std::vector<std::pair<int32_t, int64_t>> calls;  // (first, rows)
      bool last_seen = false, token_before_scores = false;
      std::mutex mutex;
      std::condition_variable cv;
      bool done = false;
      job->on_prompt = [&](int32_t first, std::span<const float> logits, bool last) {
        EXPECT_FALSE(last_seen);
        calls.emplace_back(first, static_cast<int64_t>(logits.size()) / vocab);
        scores.insert(scores.end(), logits.begin(), logits.end());
        last_seen = last;
      };
      job->on_token = [&](int32_t, std::span<const float>) { token_before_scores |= !last_seen; };
      job->on_done = [&](Finish, const std::string&) {
        std::lock_guard lock(mutex);
        done = true;
        cv.notify_all();
      };
      ASSERT_TRUE(engine.submit(job));
      {
        std::unique_lock lock(mutex);
        ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return done; }));
      }
      const std::string what = "prompt " + std::to_string(prompt_length) + " chunk " + std::to_string(chunk);
      EXPECT_TRUE(last_seen) << what;
      EXPECT_FALSE(token_before_scores) << what;
      EXPECT_EQ(static_cast<int>(context.size()), std::min(prompt_length, 32)) << what;
      const int64_t scored = static_cast<int64_t>(context.size()) - 1;
      ASSERT_EQ(static_cast<int64_t>(scores.size()), scored * vocab) << what;
      int64_t at = 0;
      for (const auto& [first, rows] : calls) {  // consecutive, each at most `chunk` positions
        EXPECT_EQ(first, at) << what;
        if (chunk > 0) {
          EXPECT_LE(rows, chunk) << what;
        }
        at += rows;
      }
      if (scored == 0) {
        EXPECT_EQ(calls.size(), 1u) << what;
        continue;
      }
      const std::vector<float> whole = model->logits(IdsView{context.data(), 1, static_cast<int64_t>(context.size())});
      EXPECT_EQ(std::memcmp(scores.data(), whole.data(), scores.size() * sizeof(float)), 0) << what;
    }
  }
}

// A step of many generations runs on lanes (chunks of whole sessions, one single-threaded call
// each, on three threads here whatever the machine has): every generation still gets the tokens
// and the logits' bits it gets alone, prompts of every length (a step mixes prefills and decoding)
// and restarts past the window included. With one thread no step runs on lanes.
TEST(GenerationEngine, StepsOnLanesGiveEveryGenerationItsBitsAlone) {
  const auto model = tiny_model();
  constexpr int jobs = 40;
  std::vector<std::vector<int32_t>> prompts(jobs);
  std::vector<GenerateOptions> opts;
  std::vector<std::vector<int32_t>> solo(jobs);
  std::vector<std::vector<float>> solo_logits(jobs);
  for (int i = 0; i < jobs; ++i) {
    for (int k = 0; k <= (i * 7) % 29; ++k) prompts[i].push_back((3 * i + 5 * k) % 256);
    opts.push_back(options(500 + i, 5 + (i * 11) % 40));
    Generator g(model, prompts[i], opts[i]);
    while (auto t = g.next()) {
      solo[i].push_back(*t);
      solo_logits[i].insert(solo_logits[i].end(), g.logits().begin(), g.logits().end());
    }
  }
  for (int threads : {3, 1}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    Metrics metrics;
    CallOptions call;
    call.threads = threads;
    GenerationEngine engine(64, 64, call, metrics);
    const std::vector<Outcome> batched = run_all(engine, model, prompts, opts);
    for (int i = 0; i < jobs; ++i) {
      EXPECT_EQ(batched[i].finish, Finish::length) << i;
      EXPECT_EQ(batched[i].tokens, solo[i]) << i;
      ASSERT_EQ(batched[i].logits.size(), solo_logits[i].size()) << i;
      EXPECT_EQ(std::memcmp(batched[i].logits.data(), solo_logits[i].data(), solo_logits[i].size() * sizeof(float)), 0)
          << "generation " << i;
    }
    if (threads > 1) EXPECT_GT(engine.lane_steps(), 0u);
    else EXPECT_EQ(engine.lane_steps(), 0u);
  }
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

// A model past 16 M weights a token (here one layer of d_model 1024: 17 M) reads its weights from
// memory once per call, so its steps stay one call on the pool, never lanes; the tokens are
// still those of each generation alone.
TEST(GenerationEngine, ALargerModelsStepsStayOneCall) {
  ModelConfig c;
  c.d_model = 1024;
  c.n_layers = 1;
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.d_ff = 4096;
  c.length = 16;
  const auto model = Model::from_parameters(c, init_parameters(c, 3));
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5}, {6}};
  std::vector<GenerateOptions> opts;
  for (int i = 0; i < 3; ++i) opts.push_back(options(70 + i, 4));
  Metrics metrics;
  CallOptions call;
  call.threads = 2;
  GenerationEngine engine(8, 8, call, metrics);
  const std::vector<Outcome> outcomes = run_all(engine, model, prompts, opts);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(outcomes[i].tokens, solo_tokens(model, prompts[i], opts[i])) << i;
  EXPECT_EQ(engine.lane_steps(), 0u);
}

// The prefix cache serves generations' prompts and keeps finished ones, and changes no bit: a
// repeated request and a chat-like follow-up (prompt + answer + more) reuse rows and give the
// tokens of a generation without any cache, as do prompts past the window and generations that
// restart their context.
TEST(GenerationEngine, PrefixCacheServesPromptsAndKeepsFinishedOnes) {
  const auto model = tiny_model();  // window 32
  PrefixCache cache(model, PrefixCacheOptions{size_t{8} << 20});
  Metrics metrics;
  GenerationEngine engine(8, 8, {}, metrics, &cache);
  std::vector<int32_t> a;
  for (int k = 0; k < 20; ++k) a.push_back(60 + 3 * k);

  // Cold: nothing to reuse; the generation's rows are filed at its end.
  const auto first = run_all(engine, model, {a}, {options(5, 6)});
  ASSERT_EQ(first[0].finish, Finish::length);
  EXPECT_EQ(first[0].tokens, solo_tokens(model, a, options(5, 6)));
  EXPECT_EQ(engine.rows_reused(), 0u);
  EXPECT_EQ(cache.stats().entries, 1u);

  // The same request again: its prompt comes from the cache (a block of 16 of its 20 tokens).
  const auto again = run_all(engine, model, {a}, {options(5, 6)});
  EXPECT_EQ(again[0].tokens, first[0].tokens);
  EXPECT_EQ(engine.rows_reused(), 16u);

  // A follow-up holding the prompt, the answer and more: all but the answer's last token (never
  // computed) are reused, and the generation goes past the window (restarts) unchanged.
  std::vector<int32_t> b = a;
  b.insert(b.end(), first[0].tokens.begin(), first[0].tokens.end());
  b.insert(b.end(), {7, 8, 9});
  const uint64_t before = engine.rows_reused();
  const auto follow = run_all(engine, model, {b}, {options(6, 40)});
  EXPECT_EQ(follow[0].tokens, solo_tokens(model, b, options(6, 40)));
  EXPECT_EQ(engine.rows_reused() - before, a.size() + first[0].tokens.size() - 1);

  // Together, with shared and unshared prefixes, one past the window (truncated): each equals
  // its solo tokens, cold and warm.
  std::vector<std::vector<int32_t>> prompts = {a, b, {1, 2, 3}, {}, a};
  for (int k = 0; k < 45; ++k) prompts[3].push_back(100 + k);
  prompts[4].push_back(11);
  std::vector<GenerateOptions> opts = {options(1, 3), options(2, 30), options(3, 5), options(4, 50), options(5, 12)};
  for (int round = 0; round < 2; ++round) {
    const auto together = run_all(engine, model, prompts, opts);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(together[i].tokens, solo_tokens(model, prompts[i], opts[i])) << "round " << round << ", job " << i;
  }
  EXPECT_EQ(cache.impl().check(), "");
  EXPECT_EQ(cache.stats().rows_reused, engine.rows_reused());
}

// Without a cache, or on the reference device, nothing is reused and nothing changes.
TEST(GenerationEngine, ReferenceDeviceAndNoCacheReuseNothing) {
  const auto model = tiny_model();
  std::vector<int32_t> a;
  for (int k = 0; k < 20; ++k) a.push_back(60 + 3 * k);
  const auto expected = solo_tokens(model, a, options(5, 6));
  PrefixCache cache(model, PrefixCacheOptions{size_t{8} << 20});
  Metrics metrics;
  CallOptions reference;
  reference.device = Device::reference;
  GenerationEngine on_reference(2, 2, reference, metrics, &cache);
  GenerationEngine without(2, 2, {}, metrics, nullptr);
  for (int round = 0; round < 2; ++round) {
    EXPECT_EQ(run_all(on_reference, model, {a}, {options(5, 6)})[0].tokens, expected);
    EXPECT_EQ(run_all(without, model, {a}, {options(5, 6)})[0].tokens, expected);
  }
  EXPECT_EQ(on_reference.rows_reused() + without.rows_reused(), 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

// Flow control: a job with max_ahead stops after that many tokens nobody took back, while the
// others go on; it continues as its consumer takes them, with the tokens it gets alone; and a
// job waiting for its consumer can still be cancelled (the runner is asleep, cancel wakes it).
TEST(GenerationEngine, AJobAheadOfItsConsumerWaitsWithoutChangingABit) {
  const auto model = tiny_model();
  const std::vector<int32_t> prompt = {5, 6, 7};
  Metrics metrics;
  GenerationEngine engine(4, 4, {}, metrics);
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<int32_t> slow_tokens;
  std::optional<Finish> slow_end, fast_end, stuck_end;
  auto make = [&](uint64_t seed, int32_t tokens, int32_t max_ahead, std::vector<int32_t>* out,
                  std::optional<Finish>* end) {
    auto job = std::make_shared<GenerationJob>();
    job->generator = std::make_unique<Generator>(model, prompt, options(seed, tokens));
    job->max_tokens = tokens;
    job->max_ahead = max_ahead;
    job->on_token = [&, out](int32_t t, std::span<const float>) {
      std::lock_guard lock(mutex);
      if (out) out->push_back(t);
      cv.notify_all();
    };
    job->on_done = [&, end](Finish f, const std::string&) {
      std::lock_guard lock(mutex);
      *end = f;
      cv.notify_all();
    };
    return job;
  };
  auto slow = make(3, 40, 3, &slow_tokens, &slow_end);  // past the window: restarts while paused
  auto fast = make(4, 200, 0, nullptr, &fast_end);
  ASSERT_TRUE(engine.submit(slow));
  ASSERT_TRUE(engine.submit(fast));
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return fast_end.has_value(); }));
    EXPECT_EQ(*fast_end, Finish::length);
    EXPECT_EQ(slow_tokens.size(), 3u) << "ran ahead of its consumer";
    EXPECT_FALSE(slow_end.has_value());
  }
  // The consumer takes one token at a time; the job never gets more than 3 ahead.
  for (size_t taken = 0;; ++taken) {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30),
                            [&] { return slow_end.has_value() || slow_tokens.size() == taken + 3; }));
    ASSERT_LE(slow_tokens.size(), taken + 3);
    if (slow_end) break;
    lock.unlock();
    engine.consumed(*slow);
  }
  EXPECT_EQ(*slow_end, Finish::length);
  EXPECT_EQ(slow_tokens, solo_tokens(model, prompt, options(3, 40)));

  auto stuck = make(5, 1 << 30, 1, nullptr, &stuck_end);
  ASSERT_TRUE(engine.submit(stuck));
  {
    std::unique_lock lock(mutex);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return stuck->ahead.load() == 1; }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the runner goes to sleep
  engine.cancel(*stuck);
  std::unique_lock lock(mutex);
  ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(30), [&] { return stuck_end.has_value(); }));
  EXPECT_EQ(*stuck_end, Finish::abort);
  EXPECT_EQ(engine.pending(), 0u);
}

}  // namespace
}  // namespace lockstep::serve
