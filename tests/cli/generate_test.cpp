// lockstep generate and the sampling rules: the same seed gives the same text on any thread
// count and either device; greedy is the model's argmax chain; --stop and the window end stop it.
#include <gtest/gtest.h>

#include "lockstep/model.hpp"
#include "lockstep/sampling.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

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
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--cpu-cores", "1"}, {"--cpu-cores", "2"},
                                               {"--cpu-cores", "3"}, {"--device", "reference"}}) {
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
  // The window's end.
  r = test::run_command({kBin, "generate", m, "--prompt", "xy", "-n", "100"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.size(), 24u + 1u + 1u) << "the prompt, bytes up to the window, one more chosen at its end, newline";
  EXPECT_NE(r.err.find("stopped at the end of the 24-byte window"), std::string::npos) << r.err;
}

TEST(Generate, RefusesBadOptions) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  auto r = test::run_command({kBin, "generate", m, "--prompt", "a", "--temperature", "-1"});
  EXPECT_NE(r.err.find("temperature must be"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", "a", "--top-p", "0"});
  EXPECT_NE(r.err.find("top-p must be in (0, 1]"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", ""});
  EXPECT_NE(r.err.find("the prompt is empty"), std::string::npos) << r.err;
  r = test::run_command({kBin, "generate", m, "--prompt", std::string(30, 'a')});
  EXPECT_NE(r.err.find("the window is 24"), std::string::npos) << r.err;
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

}  // namespace
}  // namespace lockstep
