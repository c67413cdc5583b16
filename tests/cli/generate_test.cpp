// lockstep generate and the sampling rules: the same seed gives the same text on any thread
// count and either device; greedy is the model's argmax chain; --stop stops it; past the window
// the context restarts as include/lockstep/generator.hpp defines; errors come before any output.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "core/sha256.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/model.hpp"
#include "lockstep/sampling.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;
// SHA-256 of `lockstep generate examples/models/fortunes --prompt "The " -n 200 --temperature 0.8
// --seed 1`'s standard output (the README's example, past the 128-byte window). It changes only
// if the model, the arithmetic, the sampler or the window policy does.
const std::string kFortunesGolden = "fd54d1f4d3c80cdf273c4d715f66e91c4cea5f50e13afefd9ad9120908530de4";

std::string tiny_model(const test::TempDir& dir) {
  const auto r = test::run_command({kBin, "init", "--seed", "9", "--d-model", "16", "--n-layers", "2", "--n-heads", "2",
                                    "--d-ff", "24", "--length", "24", "-o", dir / "m"});
  EXPECT_EQ(r.status, 0) << r.err;
  return dir / "m";
}

TEST(Generate, TheSameSeedGivesTheSameTextOnEveryPath) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  std::string first;
  std::vector<std::vector<std::string>> paths = {{"--cpu-cores", "1"}, {"--cpu-cores", "2"}, {"--cpu-cores", "3"},
                                                 {"--device", "reference"}};
  for (const std::string& target : simd_targets()) paths.push_back({"--simd", target});  // AVX2, portable, ...
  for (const std::vector<std::string>& extra : paths) {
    std::vector<std::string> argv = {kBin, "generate", m, "--prompt", "abc", "-n", "12", "--temperature", "1.5",
                                     "--top-k", "50", "--top-p", "0.9", "--seed", "7"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = test::run_command(argv);
    ASSERT_EQ(r.status, 0) << r.err;
    if (first.empty()) first = r.out;
    EXPECT_EQ(r.out, first) << extra[0] << " " << extra[1];
  }
  EXPECT_EQ(first.size(), 3u + 12u + 1u);  // prompt, 12 bytes, newline
  const auto other = test::run_command({kBin, "generate", m, "--prompt", "abc", "-n", "12", "--temperature", "1.5", "--seed", "8"});
  EXPECT_NE(other.out, first);
}

TEST(Generate, GreedyFollowsNextBytesAndStopsWhereAsked) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  const auto model = Model::load(m);
  std::vector<int32_t> ids = {'x', 'y'};
  std::string want = "xy";
  for (int i = 0; i < 6; ++i) {
    const int32_t next = model->next_bytes({ids.data(), 1, static_cast<int64_t>(ids.size())})[0];
    ids.push_back(next);
    want.push_back(static_cast<char>(next));
  }
  auto r = test::run_command({kBin, "generate", m, "--prompt", "xy", "-n", "6"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, want + "\n");
  // --stop: the text stops right after the stop string.
  const std::string stop = want.substr(4, 2);
  r = test::run_command({kBin, "generate", m, "--prompt", "xy", "-n", "6", "--stop", stop});
  EXPECT_EQ(r.out.substr(0, r.out.size() - 1).substr(r.out.size() - 1 - stop.size()), stop);
  // Past the window: generation goes on (the context restarts; PastTheWindow* below).
  r = test::run_command({kBin, "generate", m, "--prompt", "xy", "-n", "100"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.size(), 2u + 100u + 1u) << "the prompt, 100 bytes, newline";
  EXPECT_EQ(r.err, "");
}

TEST(Generate, RefusesBadOptions) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  auto r = test::run_command({kBin, "generate", m, "--prompt", "a", "--temperature", "-1"});
  // The value as given, the shortest text of its f32 ("got -1.000000" before issue 42).
  EXPECT_NE(r.err.find("temperature must be a finite number >= 0 (0: greedy), got -1\n"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", "a", "--top-p", "1.0000001"});
  EXPECT_NE(r.err.find("top-p must be in (0, 1] (1: off), got 1.0000001\n"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", "a", "--top-p", "0"});
  EXPECT_NE(r.err.find("top-p must be in (0, 1]"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", ""});
  EXPECT_NE(r.err.find("the prompt is empty"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", std::string(30, 'a'), "--no-truncate"});
  EXPECT_NE(r.err.find("the window is 24"), std::string::npos) << r.err;
}

// Errors come first: a bad option or prompt prints nothing on stdout (not even the prompt).
TEST(Generate, ErrorsComeBeforeAnyOutput) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  const std::vector<std::vector<std::string>> bad = {
      {"-n", "-5"},
      {"--temperature", "-1"},
      {"--top-p", "1.5"},
      {"--top-k", "-2"},
      {"--temperature", "0.8x"},
      {"--top-p", "1e-50"},
      // Just above the midpoint of 1 and 1 + 2^-23: rounded once to f32 it is above 1 (parsed to
      // long double and rounded again it would be 1).
      {"--top-p", "1.0000000596046447753914720329472543003390683225006796419620513916015625"},
      {"--no-truncate"},  // with a prompt longer than the window
  };
  for (const auto& extra : bad) {
    const std::string prompt = extra[0] == "--no-truncate" ? std::string(30, 'a') : "hello";
    std::vector<std::string> argv = {kBin, "generate", m, "--prompt", prompt};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.status, 1) << extra[0];
    EXPECT_EQ(r.out, "") << extra[0] << ": printed before the error";
    EXPECT_NE(r.err.find("lockstep generate: error: "), std::string::npos) << r.err;
  }
  const auto r = test::run_command({kBin, "generate", m, "--prompt", "hello", "-n", "-5"});
  EXPECT_NE(r.err.find("the token count must be >= 0, got -5"), std::string::npos) << r.err;
  const auto text = test::run_command({kBin, "generate", m, "--prompt", "hello", "--temperature", "0.8x"});
  EXPECT_NE(text.err.find("--temperature: '0.8x' is not a number"), std::string::npos) << text.err;
}

// A prompt longer than the window keeps its last `length` bytes, with a notice on stderr; the
// whole prompt is still printed, and what follows is what the kept bytes alone give.
TEST(Generate, ALongPromptKeepsItsLastWindow) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  const std::string prompt = "0123456789abcdefghijklmnopqrstuvwxyz";  // 36 bytes, window 24
  const std::vector<std::string> opts = {"-n", "30", "--temperature", "0.9", "--seed", "4"};
  std::vector<std::string> argv = {kBin, "generate", m, "--prompt", prompt};
  argv.insert(argv.end(), opts.begin(), opts.end());
  const auto r = test::run_command(argv);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("the prompt holds 36 bytes, more than the 24-byte window; generating from its last 24"),
            std::string::npos)
      << r.err;
  argv[4] = prompt.substr(12);
  const auto kept = test::run_command(argv);
  ASSERT_EQ(kept.status, 0) << kept.err;
  EXPECT_EQ(kept.err, "");
  ASSERT_EQ(r.out.substr(0, prompt.size()), prompt);
  EXPECT_EQ(r.out.substr(prompt.size()), kept.out.substr(24));
}

// The policy itself, on windows of odd, even and minimal size.
TEST(GenerationContext, RestartsWithTheLastHalfRoundedUp) {
  EXPECT_EQ(kept_on_restart(128), 64);
  EXPECT_EQ(kept_on_restart(7), 4);
  EXPECT_EQ(kept_on_restart(2), 1);
  EXPECT_EQ(kept_on_restart(1), 1);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
  GenerationContext c(7, prompt);
  EXPECT_FALSE(c.push(6));
  EXPECT_FALSE(c.push(7));
  EXPECT_EQ(std::vector<int32_t>(c.tokens().begin(), c.tokens().end()), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(c.push(8));  // full: the last 3, then 8
  EXPECT_EQ(std::vector<int32_t>(c.tokens().begin(), c.tokens().end()), (std::vector<int32_t>{5, 6, 7, 8}));
  EXPECT_FALSE(c.push(9));
  GenerationContext one(1, prompt);  // a prompt of 5 in a window of 1 keeps its last token
  EXPECT_EQ(one.dropped_prompt_tokens(), 4);
  EXPECT_TRUE(one.push(6));
  EXPECT_EQ(std::vector<int32_t>(one.tokens().begin(), one.tokens().end()), (std::vector<int32_t>{6}));
  EXPECT_THROW(GenerationContext(4, prompt, false), Error);
  EXPECT_THROW(GenerationContext(4, std::vector<int32_t>{}), Error);
}

// The text past the window, computed independently: the test's own bookkeeping of where the
// context starts (a restart keeps the newest W - floor(W/2) bytes once the context would pass W),
// each step's logits from one full forward pass over the context, and the sampler.
std::string reference_text(const Model& model, const std::string& prompt, const SamplingOptions& sampling, int n) {
  const int32_t w = model.config().length;
  std::vector<int32_t> text(prompt.begin(), prompt.end());
  size_t start = text.size() > static_cast<size_t>(w) ? text.size() - static_cast<size_t>(w) : 0;
  std::string out;
  for (int step = 0; step < n; ++step) {
    const std::vector<int32_t> context(text.begin() + static_cast<std::ptrdiff_t>(start), text.end());
    EXPECT_LE(context.size(), static_cast<size_t>(w));
    const std::vector<float> logits = model.logits({context.data(), 1, static_cast<int64_t>(context.size())});
    const std::span<const float> last(logits.data() + (context.size() - 1) * 256, 256);
    const int32_t token = sample_token(last, sampling, step);
    out.push_back(static_cast<char>(token));
    text.push_back(token);
    if (text.size() - start > static_cast<size_t>(w)) start = text.size() - static_cast<size_t>(w - w / 2);
  }
  return out;
}

TEST(Generate, PastTheWindowMatchesAnIndependentRecomputation) {
  // The README's example on the shipped model (window 128): 200 bytes, two restarts.
  const std::string fortunes = std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/fortunes";
  const auto r = test::run_command({kBin, "generate", fortunes, "--prompt", "The ", "-n", "200", "--temperature", "0.8",
                                    "--seed", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ASSERT_EQ(r.out.size(), 4u + 200u + 1u);
  const auto model = Model::load(fortunes);
  EXPECT_EQ(r.out, "The " + reference_text(*model, "The ", {0.8f, 0, 1.0f, 1}, 200) + "\n");
  EXPECT_EQ(sha256_hex(r.out.data(), r.out.size()), kFortunesGolden) << r.out;

  // The Generator's bookkeeping: a prefill for the prompt, then one per restart.
  GenerateOptions g;
  g.sampling = {0.8f, 0, 1.0f, 1};
  g.max_tokens = 200;
  const std::vector<int32_t> prompt = {'T', 'h', 'e', ' '};
  Generator gen(model, prompt, g);
  std::string text = "The ";
  while (const auto token = gen.next()) text.push_back(static_cast<char>(*token));
  EXPECT_EQ(text + "\n", r.out);
  // 4 + 124 fill the window; then a restart every 65 tokens, where steps 125 and 190 push
  // tokens 124 and 189; steps 191 to 199 grow the last context from 64 to 73 (the 200th token
  // is never pushed).
  EXPECT_EQ(gen.prefills(), 3);
  EXPECT_EQ(gen.stop_reason(), StopReason::max_tokens);
  EXPECT_EQ(gen.context().tokens().size(), 73u);
}

TEST(Generate, PastTheWindowWithTopKTopPAndStop) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);  // window 24
  const auto model = Model::load(m);
  const auto r = test::run_command({kBin, "generate", m, "--prompt", "abcdefghijklmnopqrstuvwxyz0123", "-n", "90",
                                    "--temperature", "1.3", "--top-k", "50", "--top-p", "0.9", "--seed", "11"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string want = reference_text(*model, "abcdefghijklmnopqrstuvwxyz0123", {1.3f, 50, 0.9f, 11}, 90);
  EXPECT_EQ(r.out, "abcdefghijklmnopqrstuvwxyz0123" + want + "\n");
  // --stop past the window ends right after the stop text.
  const std::string stop = want.substr(60, 3);
  const auto stopped = test::run_command({kBin, "generate", m, "--prompt", "abcdefghijklmnopqrstuvwxyz0123", "-n", "90",
                                          "--temperature", "1.3", "--top-k", "50", "--top-p", "0.9", "--seed", "11",
                                          "--stop", stop});
  ASSERT_EQ(stopped.status, 0) << stopped.err;
  const size_t end = want.find(stop) + stop.size();
  EXPECT_EQ(stopped.out, "abcdefghijklmnopqrstuvwxyz0123" + want.substr(0, end) + "\n");
}

TEST(Sampling, IsAPureFunctionOfLogitsSeedAndStep) {
  std::vector<float> logits = {1.0f, 2.0f, 2.0f, -1.0f, std::numeric_limits<float>::quiet_NaN()};
  const SamplingOptions greedy{};
  EXPECT_EQ(sample_token(logits, greedy, 0), 1);
  SamplingOptions warm{1.0f, 0, 1.0f, 42};
  std::vector<int> counts(5, 0);
  for (int64_t step = 0; step < 2000; ++step) {
    const int32_t t = sample_token(logits, warm, step);
    ASSERT_NE(t, 4) << "NaN chosen";
    ++counts[static_cast<size_t>(t)];
    EXPECT_EQ(t, sample_token(logits, warm, step));
  }
  EXPECT_GT(counts[1], counts[0]);
  EXPECT_GT(counts[0], counts[3]);
  warm.top_k = 2;
  for (int64_t step = 0; step < 200; ++step) {
    const int32_t t = sample_token(logits, warm, step);
    EXPECT_TRUE(t == 1 || t == 2);
  }
}

// Infinite logits: a logit equal to the highest weighs exactly 1, so +inf ids share the draw
// and the rest weigh 0; all -inf is a uniform draw (before, their weights were NaN and top-p
// kept no candidate at all).
TEST(Sampling, InfiniteLogitsGiveWeightsNotNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {1.0f, inf, 2.0f, inf, -inf};
  std::vector<int> counts(5, 0);
  for (int64_t step = 0; step < 400; ++step) {
    SampleTrace trace;
    const int32_t t = sample_token(logits, {1.0f, 0, 0.75f, 3}, step, &trace);
    ASSERT_TRUE(t == 1 || t == 3) << t;
    ++counts[static_cast<size_t>(t)];
    EXPECT_EQ(trace.candidates, (std::vector<int32_t>{1, 3}));
    EXPECT_EQ(trace.weights, (std::vector<float>{1.0f, 1.0f}));
    EXPECT_EQ(trace.total, 2.0);
  }
  EXPECT_GT(counts[1], 100);
  EXPECT_GT(counts[3], 100);
  const std::vector<float> none(4, -inf);
  std::vector<int> seen(4, 0);
  for (int64_t step = 0; step < 400; ++step) ++seen[static_cast<size_t>(sample_token(none, {0.5f, 0, 1.0f, 3}, step))];
  for (int c : seen) EXPECT_GT(c, 50);
}

// The candidates' order is a stable sort by logit, highest first: equal logits (+0 and -0
// among them) by increasing id, NaN left out, infinities at the ends. sample_token sorts packed
// integer keys; a change there that reorders ties changes which id a draw lands on.
TEST(Sampling, CandidatesAreAStableSortByLogit) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float denormal = std::numeric_limits<float>::denorm_min();
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::vector<float> logits(1 + seed % 300);
    const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, inf, -inf, nan, denormal, -denormal, 1e30f, -1e30f};
    for (size_t i = 0; i < logits.size(); ++i) {
      const uint64_t r = (seed * 2654435761u + i * 40503u) % 97;
      logits[i] = r < 12 ? pool[r] : static_cast<float>(static_cast<int>(r % 23) - 11) * 0.25f;
    }
    std::vector<int32_t> want;
    for (size_t i = 0; i < logits.size(); ++i)
      if (logits[i] == logits[i]) want.push_back(static_cast<int32_t>(i));
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    if (want.empty()) continue;
    SampleTrace trace;
    sample_token(logits, {1.0f, 0, 1.0f, seed}, 0, &trace);
    EXPECT_EQ(trace.candidates, want) << "seed " << seed;
  }
}

}  // namespace
}  // namespace lockstep
