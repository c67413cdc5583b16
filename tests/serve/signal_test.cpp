// End to end: SIGTERM, SIGINT and SIGHUP stop the server, answering the calls already read.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

struct StopSignal {
  int signo;
  const char* name;
};

class ServeSignals : public ::testing::TestWithParam<StopSignal> {
 protected:
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir);
  const std::string sock = dir / "s.sock";
};

TEST_P(ServeSignals, StopsPrintsTheCountsRemovesTheSocketAndExits128PlusN) {
  const StopSignal s = GetParam();
  ServerProcess server({model_dir, "--socket", sock, "--at"});
  ASSERT_TRUE(server.running()) << server.err();
  RawClient a(sock), idle(sock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.call(call_input(random_ids(32, 256, 1), i))[0], '\0');
  EXPECT_EQ(a.call(call_input(random_ids(32, 256, 1), 99))[0], '\1');  // answered, not run
  EXPECT_EQ(server.stop(s.signo, 10), 128 + s.signo);
  EXPECT_EQ(stop_counts(server.out(), s.name), std::make_pair(int64_t{4}, int64_t{3})) << server.out();
  EXPECT_FALSE(path_exists(sock));
  // Connected clients, idle or not, see the connection end.
  EXPECT_TRUE(idle.closed_by_server());
  EXPECT_TRUE(a.closed_by_server());
}

INSTANTIATE_TEST_SUITE_P(Each, ServeSignals,
                         ::testing::Values(StopSignal{SIGTERM, "SIGTERM"}, StopSignal{SIGINT, "SIGINT"},
                                           StopSignal{SIGHUP, "SIGHUP"}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(ServeStop, AStopWithNoCallsPrintsZeroAndTheSingularReadsRight) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir), sock = dir / "s.sock";
  ServerProcess none({model_dir, "--socket", sock});
  ASSERT_TRUE(none.running()) << none.err();
  EXPECT_EQ(none.stop(SIGINT), 128 + SIGINT);
  EXPECT_NE(none.out().find("lockstep serve: stopped by SIGINT, 0 calls in 0 runs, 0 rows computed, 0 rows reused\n"), std::string::npos);
  ServerProcess one({model_dir, "--socket", sock});
  ASSERT_TRUE(one.running()) << one.err();
  RawClient c(sock);
  EXPECT_EQ(c.call(call_input(random_ids(32, 256, 1)))[0], '\0');
  EXPECT_EQ(one.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_NE(one.out().find("lockstep serve: stopped by SIGTERM, 1 call in 1 run, "), std::string::npos);
}

// Past a thousand calls the stop line still holds plain integers, as scripts parse it.
TEST(ServeStop, TheStopLinesCountsArePlainIntegersPastAThousand) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir), sock = dir / "s.sock";
  ServerProcess server({model_dir, "--socket", sock, "--at"});
  ASSERT_TRUE(server.running()) << server.err();
  RawClient c(sock);
  const auto ids = random_ids(32, 256, 5);
  for (int i = 0; i < 1001; ++i) ASSERT_EQ(c.call(call_input(ids, i % 32))[0], '\0') << i;
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  EXPECT_EQ(stop_counts(server.out(), "SIGTERM").first, 1001) << server.out();
  EXPECT_NE(server.out().find("lockstep serve: stopped by SIGTERM, 1001 calls in "), std::string::npos) << server.out();
}

// Calls read before the signal are answered, even those still waiting for the model: slow runs
// on the reference device, one at a time, from several clients at once.
TEST(ServeStop, CallsAlreadyReadAreAnsweredBeforeItStops) {
  TempDir dir;
  const std::string model_dir = dir / "m", sock = dir / "s.sock";
  const CommandResult init = run_command({LOCKSTEP_BINARY, "init", "--seed", "2", "--d-model", "64",
                                          "--n-layers", "2", "--n-heads", "2", "--d-ff", "128",
                                          "--length", "256", "-o", model_dir});
  ASSERT_EQ(init.status, 0) << init.err;
  ServerProcess server({model_dir, "--socket", sock, "--device", "reference", "--output", "hidden"});
  ASSERT_TRUE(server.running()) << server.err();
  constexpr int kClients = 4;
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < kClients; ++i) clients.push_back(std::make_unique<RawClient>(sock));
  const std::string input = call_input(random_ids(256, 256, 4));
  for (auto& c : clients) ASSERT_TRUE(c->send_frame(input));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // read at once, run one by one
  ::kill(server.pid(), SIGTERM);
  for (auto& c : clients) {
    const auto answer = c->read_frame();
    ASSERT_TRUE(answer);
    EXPECT_EQ((*answer)[0], '\0');
    EXPECT_EQ(answer->size(), 1 + 256 * 64 * 4u);
    EXPECT_TRUE(c->closed_by_server());
  }
  EXPECT_EQ(server.stop(0), 128 + SIGTERM);
  EXPECT_EQ(stop_counts(server.out(), "SIGTERM"), std::make_pair(int64_t{kClients}, int64_t{kClients}));
  EXPECT_FALSE(path_exists(sock));
}

// A client that stops reading its answers cannot hold the stop up for long: its blocked write is
// failed after a grace of 5 s.
TEST(ServeStop, AClientThatStopsReadingDelaysTheStopByAGraceAtMost) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir), sock = dir / "s.sock";
  ServerProcess server({model_dir, "--socket", sock});
  ASSERT_TRUE(server.running()) << server.err();
  RawClient stuck(sock);
  std::string frames;
  for (int i = 0; i < 60; ++i) {  // 60 answers of 35 KB: more than the socket buffers hold
    std::string f(8, '\0');
    f[0] = static_cast<char>(128);
    frames += f + call_input(random_ids(32, 256, 3));
  }
  ASSERT_TRUE(stuck.send_raw(frames));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(server.stop(SIGTERM, 30), 128 + SIGTERM);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 10.0);
  EXPECT_FALSE(path_exists(sock));
}

}  // namespace
}  // namespace lockstep::test
