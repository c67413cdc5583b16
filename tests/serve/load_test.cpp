// Load: many clients at once under --batch, every answer the bits of the same call run alone.
#include <gtest/gtest.h>
#include <signal.h>


#include "core/rng.hpp"
#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

constexpr int kClients = 32;
constexpr int kCallsEach = 250;
constexpr int32_t kLength = 32;

// Client c's call i: random ids and a random `at`, regenerated from (c, i) when checking.
std::string load_input(int client, int call) {
  const uint64_t key = static_cast<uint64_t>(client) * 100000 + static_cast<uint64_t>(call);
  const int32_t at = static_cast<int32_t>(random_below(kLength, 1234, key, 0));
  return call_input(random_ids(kLength, 256, 5000 + key), at);
}

TEST(ServeLoad, ManyClientsBatchedGetTheBitsOfEachCallAlone) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir, "model", kLength, 17), sock = dir / "s.sock";
  ServerProcess server({model_dir, "--socket", sock, "--batch", "8", "--at"});
  ASSERT_TRUE(server.running()) << server.err();

  const auto [answers, failures] = run_clients(sock, kClients, [](int c) {
    std::vector<std::string> inputs;
    for (int i = 0; i < kCallsEach; ++i) inputs.push_back(load_input(c, i));
    return inputs;
  });
  ASSERT_EQ(failures, 0);
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  const auto [calls, runs] = stop_counts(server.out(), "SIGTERM");
  EXPECT_EQ(calls, kClients * kCallsEach) << server.out();
  EXPECT_GT(runs, 0);
  EXPECT_LT(runs, calls) << "no two calls ever ran together";

  const auto model = Model::load(model_dir);
  const CallLayout layout(model->config(), {}, true);
  int mismatches = 0;
  for (int c = 0; c < kClients; ++c) {
    for (int i = 0; i < kCallsEach; ++i) {
      const std::string& got = answers[static_cast<size_t>(c)][static_cast<size_t>(i)];
      const std::string want = answer_alone(*model, layout, load_input(c, i));
      ASSERT_EQ(want[0], '\0');
      if (got.size() != want.size() || std::memcmp(got.data(), want.data(), got.size()) != 0) ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

TEST(ServeLoad, ALoneClientsCallsRunAtOnceAndAlone) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir), sock = dir / "s.sock";
  ServerProcess server({model_dir, "--socket", sock, "--batch", "8", "--at"});
  ASSERT_TRUE(server.running()) << server.err();
  RawClient client(sock);
  for (int i = 0; i < 50; ++i) ASSERT_EQ(client.call(load_input(0, i))[0], '\0');
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_EQ(stop_counts(server.out(), "SIGTERM"), std::make_pair(int64_t{50}, int64_t{50}));
}

}  // namespace
}  // namespace lockstep::test
