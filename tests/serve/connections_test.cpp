// Connections on the event loop (issue 16, defect 3): idle connections cost no thread, the
// connection limit answers with an error handshake, and the idle timeouts close what they should
// and nothing else. In process through the public Server API, except the flags' own test.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "lockstep/server.hpp"
#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A Server on a tiny model, serving on its own thread until destroyed.
class InProcessServer {
 public:
  explicit InProcessServer(ServerOptions options, int32_t length = 16) {
    options.socket_path = dir_ / "s.sock";
    options.at = true;
    options.outputs = {"logits"};
    const ModelConfig config = tiny_config(length);
    model_ = Model::from_parameters(config, init_parameters(config, 5));
    server_ = std::make_unique<Server>(model_, options);
    serving_ = std::thread([this] { stats_ = server_->serve(); });
  }
  ~InProcessServer() { stop(); }
  ServerStats stop() {
    if (serving_.joinable()) {
      server_->stop();
      serving_.join();
    }
    return stats_;
  }
  const std::string& sock() const { return server_->options().socket_path; }
  // A call that runs, and its answer alone.
  std::string input(uint64_t seed = 1) const {
    const int32_t length = static_cast<int32_t>(model_->config().length);
    return call_input(random_ids(length, 256, seed), length / 2);
  }
  std::string expected(const std::string& input) const { return answer_alone(*model_, server_->layout(), input); }

 private:
  TempDir dir_;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Server> server_;
  ServerStats stats_;
  std::thread serving_;
};

size_t thread_count() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

std::string frame_of(const std::string& body) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[static_cast<size_t>(i)] = static_cast<char>(uint64_t{body.size()} >> (8 * i));
  return f + body;
}

// Whether the server ends the connection with a clean end of stream (not a reset) within `limit`.
bool ends_cleanly_within(RawClient& client, std::chrono::milliseconds limit) {
  timeval tv{static_cast<time_t>(limit.count() / 1000), static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
  ::setsockopt(client.fd(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char c;
  for (;;) {
    const ssize_t r = ::recv(client.fd(), &c, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    return r == 0;
  }
}

// Connects until the handshake is a normal one (the server notices a departure asynchronously).
std::unique_ptr<RawClient> connect_when_served(const std::string& sock, std::chrono::seconds limit) {
  const auto until = Clock::now() + limit;
  while (Clock::now() < until) {
    auto client = std::make_unique<RawClient>(sock);
    if (!client->handshake().contains("error")) return client;
    std::this_thread::sleep_for(5ms);
  }
  return nullptr;
}

// Idle connections at the limit deny nobody: each newcomer is served, and the least recently
// active idle connection makes way for it (a clean end of stream, as --idle-close gives).
void check_idle_ones_make_room(InProcessServer& server, int limit) {
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < limit; ++i) {
    idle.push_back(std::make_unique<RawClient>(server.sock()));
    ASSERT_FALSE(idle.back()->handshake().contains("error")) << "connection " << i;
  }
  const std::string input = server.input();
  EXPECT_EQ(idle[0]->call(input), server.expected(input));  // now the most recently active
  std::vector<std::unique_ptr<RawClient>> newcomers;
  for (int extra = 0; extra < 3; ++extra) {
    newcomers.push_back(std::make_unique<RawClient>(server.sock()));
    EXPECT_FALSE(newcomers.back()->handshake().contains("error")) << newcomers.back()->handshake();
    EXPECT_EQ(newcomers.back()->call(input), server.expected(input));
    EXPECT_TRUE(ends_cleanly_within(*idle[1 + extra], 10'000ms)) << "the oldest idle connection stayed";
  }
  EXPECT_EQ(idle[0]->call(input), server.expected(input));  // the active one and the younger ones stay
  EXPECT_EQ(idle.back()->call(input), server.expected(input));
}

// Connections that each have a call under way (half a frame here) are never closed for a
// newcomer: it gets the error handshake and a clean end, until one of them leaves.
void check_busy_ones_refuse(InProcessServer& server, int limit) {
  const std::string half = frame_of(server.input()).substr(0, 20);
  std::vector<std::unique_ptr<RawClient>> busy;
  for (int i = 0; i < limit; ++i) {
    busy.push_back(std::make_unique<RawClient>(server.sock()));
    ASSERT_TRUE(busy.back()->send_raw(half));
  }
  std::this_thread::sleep_for(500ms);  // the server has read every half frame (microseconds; slack for a busy machine)
  for (int extra = 0; extra < 3; ++extra) {
    RawClient refused(server.sock());
    EXPECT_EQ(refused.handshake(),
              nlohmann::json({{"protocol", 1},
                              {"error", "the server has " + std::to_string(limit) +
                                            " connections open, its limit, each with a call under way; try again "
                                            "later"}}));
    EXPECT_TRUE(ends_cleanly_within(refused, 10'000ms));
  }
  busy.front()->close();
  const auto next = connect_when_served(server.sock(), 20s);
  ASSERT_TRUE(next) << "a place freed was never taken";
  const std::string input = server.input();
  EXPECT_EQ(next->call(input), server.expected(input));
}

TEST(ServeConnections, AtALimitOfEightANinthClosesTheLeastRecentlyActiveIdleOne) {
  ServerOptions options;
  options.max_connections = 8;
  InProcessServer server(options);
  check_idle_ones_make_room(server, 8);
}

TEST(ServeConnections, AtALimitOfEightBusyConnectionsRefuseTheNinthUntilOneLeaves) {
  ServerOptions options;
  options.max_connections = 8;
  InProcessServer server(options);
  check_busy_ones_refuse(server, 8);
}

TEST(ServeConnections, AtTheRealLimitOf1024IdleClientsLockNobodyOut) {
  // Both ends of 1,027 connections are in this process: raise the descriptor limit if it is low.
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const rlim_t need = 2 * (max_server_connections + 16) + 64;
  if (files.rlim_cur < need) {
    if (files.rlim_max != RLIM_INFINITY && files.rlim_max < need) GTEST_SKIP() << "RLIMIT_NOFILE hard limit " << files.rlim_max;
    rlimit raised = files;
    raised.rlim_cur = need;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &raised), 0);
  }
  {
    InProcessServer server(ServerOptions{});
    check_idle_ones_make_room(server, max_server_connections);
  }
  ::setrlimit(RLIMIT_NOFILE, &files);
}

// Thread per connection would add 200 threads here.
TEST(ServeConnections, TwoHundredIdleConnectionsCostNoThread) {
  InProcessServer server(ServerOptions{});
  RawClient first(server.sock());  // the loop is running and has served a connection
  const std::string input = server.input();
  EXPECT_EQ(first.call(input), server.expected(input));
  const size_t before = thread_count();
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 200; ++i) idle.push_back(std::make_unique<RawClient>(server.sock()));
  EXPECT_EQ(first.call(input), server.expected(input));
  EXPECT_EQ(idle.back()->call(input), server.expected(input));
  const size_t after = thread_count();
  EXPECT_LE(after, before + 2) << before << " threads before 200 connections, " << after << " after";
  const ServerStats stats = server.stop();
  EXPECT_EQ(stats.calls, 3u);
  for (auto& c : idle) EXPECT_TRUE(ends_cleanly_within(*c, 10'000ms));
}

TEST(ServeConnections, HalfAFrameThenSilenceIsClosedAfterTheIdleTimeout) {
  ServerOptions options;
  options.idle_timeout = 1s;
  InProcessServer server(options);
  RawClient idle(server.sock()), partial(server.sock()), prefix_only(server.sock());
  const std::string frame = frame_of(server.input());
  const auto start = Clock::now();
  ASSERT_TRUE(partial.send_raw(frame.substr(0, frame.size() / 2)));
  ASSERT_TRUE(prefix_only.send_raw(frame.substr(0, 3)));
  EXPECT_TRUE(ends_cleanly_within(partial, 20'000ms));
  EXPECT_TRUE(ends_cleanly_within(prefix_only, 20'000ms));
  EXPECT_GE(Clock::now() - start, 1s);  // a timer never fires early
  // A connection with no partial frame is not touched by the idle timeout (idle_close is off).
  const std::string input = server.input();
  EXPECT_EQ(idle.call(input), server.expected(input));
  EXPECT_EQ(server.stop().calls, 1u);
}

TEST(ServeConnections, ASlowClientThatKeepsSendingIsAnswered) {
  ServerOptions options;
  options.idle_timeout = 2s;  // 20 times the client's pauses
  InProcessServer server(options, 4);  // a 28-byte frame: 2.8 s at one byte per 100 ms
  RawClient slow(server.sock());
  const std::string input = server.input(7);
  const std::string frame = frame_of(input);
  const auto start = Clock::now();
  for (char byte : frame) {
    ASSERT_TRUE(slow.send_raw(std::string(1, byte)));
    std::this_thread::sleep_for(100ms);
  }
  // Slower than the timeout in all, and still answered: the timer restarts with every byte.
  EXPECT_GT(Clock::now() - start, 2s);
  const auto answer = slow.read_frame();
  ASSERT_TRUE(answer);
  EXPECT_EQ(*answer, server.expected(input));
}

TEST(ServeConnections, IdleCloseEndsConnectionsWithNoCallInFlight) {
  ServerOptions options;
  options.idle_close = 500ms;
  InProcessServer server(options);
  RawClient never_called(server.sock()), called(server.sock());
  const std::string input = server.input();
  const auto start = Clock::now();
  EXPECT_EQ(called.call(input), server.expected(input));
  EXPECT_TRUE(ends_cleanly_within(never_called, 20'000ms));
  EXPECT_TRUE(ends_cleanly_within(called, 20'000ms));
  EXPECT_GE(Clock::now() - start, 500ms);  // `called` went idle after its answer, after `start`
  EXPECT_EQ(server.stop().calls, 1u);
}

// The flags reach the server: --idle-timeout closes a partial frame, --idle-close an idle one.
TEST(ServeConnections, TheIdleFlags) {
  TempDir dir;
  const std::string model_dir = make_tiny_model(dir), sock = dir / "s.sock";
  ServerProcess server({model_dir, "--socket", sock, "--idle-timeout", "0.3", "--idle-close", "1.5"});
  ASSERT_TRUE(server.running()) << server.err();
  RawClient partial(sock), idle(sock);
  ASSERT_TRUE(partial.send_raw(std::string(5, '\0')));
  EXPECT_TRUE(ends_cleanly_within(partial, 20'000ms));
  EXPECT_TRUE(ends_cleanly_within(idle, 20'000ms));
  EXPECT_EQ(server.stop(SIGTERM), 128 + SIGTERM);
  for (const char* bad : {"-1", "2e6"}) {
    ServerProcess refused({model_dir, "--socket", sock, "--idle-close", bad});
    EXPECT_EQ(refused.stop(0, 10), 1);
    EXPECT_NE(refused.err().find("--idle-close must be seconds in [0, 1000000] (0: never)"), std::string::npos)
        << refused.err();
  }
}

}  // namespace
}  // namespace lockstep::test
