// serve's prefix cache end to end: concurrent sampling loops, sharing and not sharing prefixes,
// get the same answers with the cache on, off, and too small to hold much (evictions), equal to
// each call run alone; the stop line reports the rows computed and reused.
#include <gtest/gtest.h>
#include <signal.h>

#include <regex>

#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

constexpr int kClients = 6;
constexpr int32_t kLength = 24;

// Client c's text: clients 0-2 share their first 10 tokens.
std::vector<int32_t> text_of(int client) {
  auto t = random_ids(kLength, 256, 900 + static_cast<uint64_t>(client));
  if (client < 3) {
    const auto shared = random_ids(10, 256, 899);
    std::copy(shared.begin(), shared.end(), t.begin());
  }
  return t;
}

std::string loop_input(int client, int32_t at) {
  auto window = text_of(client);
  for (int32_t i = at + 1; i < kLength; ++i) window[static_cast<size_t>(i)] = 0;
  return call_input(window, at);
}

std::pair<int64_t, int64_t> rows(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex("([0-9,]+) rows? computed, ([0-9,]+) rows? reused"))) return {-1, -1};
  auto number = [](std::string s) {
    std::erase(s, ',');
    return std::stoll(s);
  };
  return {number(m[1]), number(m[2])};
}

TEST(ServeCache, SamplingLoopsGetTheSameBitsWithTheCacheOnOffAndTiny) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir, "model", kLength, 23);
  const auto model = Model::load(model_dir);
  const CallLayout layout(model->config(), {"logits"}, true);
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{}, {"--no-cache"}, {"--cache-mb", "0"}, {"--cache-mb", "1"}}) {
    const std::string sock = dir / "s.sock";
    std::vector<std::string> args = {model_dir, "--socket", sock, "--batch", "4", "--at", "--output", "logits"};
    args.insert(args.end(), flags.begin(), flags.end());
    ServerProcess server(args);
    ASSERT_TRUE(server.running()) << server.err();
    const auto [answers, failures] = run_clients(sock, kClients, [](int c) {
      std::vector<std::string> inputs;
      for (int32_t at = 0; at < kLength; ++at) inputs.push_back(loop_input(c, at));
      for (int32_t at = kLength - 1; at >= 0; at -= 5) inputs.push_back(loop_input(c, at));
      return inputs;
    });
    ASSERT_EQ(failures, 0);
    ASSERT_EQ(server.stop(SIGINT), 128 + SIGINT);
    const std::string what = flags.empty() ? "default cache" : flags[0];
    for (int c = 0; c < kClients; ++c) {
      size_t i = 0;
      for (int32_t at = 0; at < kLength; ++at, ++i)
        ASSERT_EQ(answers[static_cast<size_t>(c)][i], answer_alone(*model, layout, loop_input(c, at))) << what;
      for (int32_t at = kLength - 1; at >= 0; at -= 5, ++i)
        ASSERT_EQ(answers[static_cast<size_t>(c)][i], answer_alone(*model, layout, loop_input(c, at))) << what;
    }
    const auto [computed, reused] = rows(server.out());
    ASSERT_GE(computed, 0) << server.out();
    if (flags.empty()) {
      EXPECT_GT(reused, 3 * computed) << server.out();
    } else if (flags[0] != "--cache-mb" || flags[1] == "0") {
      EXPECT_EQ(reused, 0) << server.out();
    }
  }
}

}  // namespace
}  // namespace lockstep::test
