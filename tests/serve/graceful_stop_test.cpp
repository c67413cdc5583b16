// Stopping while clients still pipeline calls (issue 16, defect 8): every client gets every answer
// the server owes it, each whole, and then a clean end of stream, never ECONNRESET. In process,
// through the public Server API, many rounds bounded in time.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "lockstep/server.hpp"
#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

using Clock = std::chrono::steady_clock;

// What a blocking read of one frame ended with.
enum class Read { frame, end_of_stream, reset, truncated, failed };

Read read_fully(int fd, void* p, size_t n, bool frame_started) {
  auto* dst = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, dst, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno == ECONNRESET ? Read::reset : Read::failed;
    if (r == 0) return frame_started ? Read::truncated : Read::end_of_stream;
    frame_started = true;
    dst += r;
    n -= static_cast<size_t>(r);
  }
  return Read::frame;
}

Read read_frame(int fd, std::string& body) {
  uint8_t header[8];
  const Read h = read_fully(fd, header, 8, false);
  if (h != Read::frame) return h;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(header[i]) << (8 * i);
  if (n > (1u << 24)) return Read::failed;
  body.assign(n, '\0');
  return read_fully(fd, body.data(), n, true);
}

std::string frame_of(const std::string& body) {
  std::string f(8, '\0');
  for (int i = 0; i < 8; ++i) f[static_cast<size_t>(i)] = static_cast<char>(uint64_t{body.size()} >> (8 * i));
  return f + body;
}

// One pipelining client: a writer thread sends kCalls calls as fast as the socket takes them
// (stopping at the first failed send: the server closed), while the reader reads answers until
// the stream ends.
struct PipeliningClient {
  static constexpr int kCalls = 400;
  RawClient raw;
  std::vector<std::string> answers;
  Read end = Read::failed;
  std::atomic<int> read_count{0};
  std::thread writer, reader;

  PipeliningClient(const std::string& sock, const std::vector<std::string>& inputs) : raw(sock) {
    writer = std::thread([this, &inputs] {
      for (int i = 0; i < kCalls; ++i)
        if (!raw.send_raw(frame_of(inputs[static_cast<size_t>(i) % inputs.size()]))) return;
    });
    reader = std::thread([this] {
      for (;;) {
        std::string body;
        const Read r = read_frame(raw.fd(), body);
        if (r != Read::frame) {
          end = r;
          return;
        }
        answers.push_back(std::move(body));
        read_count.fetch_add(1);
      }
    });
  }
  void join() {
    reader.join();
    writer.join();
  }
};

TEST(ServeGracefulStop, PipeliningClientsGetEveryAnswerOwedThenACleanEnd) {
  const ModelConfig config = tiny_config(16);
  const auto model = std::shared_ptr<const Model>(Model::from_parameters(config, init_parameters(config, 6)));
  std::vector<std::string> inputs, expected;
  {
    const CallLayout layout(config, {"logits"}, true);
    for (int i = 0; i < 5; ++i) {
      inputs.push_back(call_input(random_ids(16, 256, 40 + static_cast<uint64_t>(i)), i * 3));
      expected.push_back(answer_alone(*model, layout, inputs.back()));
    }
  }
  constexpr int kClients = 4;
  const auto start = Clock::now();
  int rounds = 0;
  // At least 5 rounds, then as many more as fit in 12 s (at most 40).
  while (rounds < 5 || (rounds < 40 && Clock::now() - start < std::chrono::seconds(12))) {
    ++rounds;
    TempDir dir;
    ServerOptions options;
    options.socket_path = dir / "s.sock";
    options.batch = 4;
    options.at = true;
    options.outputs = {"logits"};
    Server server(model, options);
    ServerStats stats;
    std::thread serving([&] { stats = server.serve(); });
    std::vector<std::unique_ptr<PipeliningClient>> clients;
    for (int c = 0; c < kClients; ++c) clients.push_back(std::make_unique<PipeliningClient>(options.socket_path, inputs));
    // Stop once every client has some answers, so that the stop meets calls in flight.
    const auto wait_until = Clock::now() + std::chrono::seconds(20);
    for (auto& c : clients)
      while (c->read_count.load() < 3 && Clock::now() < wait_until) std::this_thread::sleep_for(std::chrono::microseconds(200));
    server.stop();
    for (auto& c : clients) c->join();
    serving.join();

    uint64_t answered = 0;
    for (int c = 0; c < kClients; ++c) {
      const PipeliningClient& client = *clients[static_cast<size_t>(c)];
      EXPECT_EQ(client.end, Read::end_of_stream)
          << "round " << rounds << " client " << c << " after " << client.answers.size()
          << " answers: " << (client.end == Read::reset ? "ECONNRESET" : client.end == Read::truncated ? "a truncated frame" : "a failed read");
      EXPECT_GE(client.answers.size(), 3u);
      for (size_t i = 0; i < client.answers.size(); ++i)
        ASSERT_EQ(client.answers[i], expected[i % expected.size()]) << "round " << rounds << " client " << c << " answer " << i;
      answered += client.answers.size();
    }
    // Every call the server counts as answered reached its client whole.
    EXPECT_EQ(stats.calls, answered) << "round " << rounds;
    if (::testing::Test::HasFailure()) break;
  }
}

}  // namespace
}  // namespace lockstep::test
