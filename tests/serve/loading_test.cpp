// The HTTP ports while the model loads (HttpLoadingListeners): bound before any model exists,
// they answer /health and every other request with 503 ("loading"), and the Server built once
// the model is there takes the same ports over and answers 200, refusing no connection between.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "lockstep/server.hpp"
#include "serve/serve_fixture.hpp"

namespace lockstep::test {
namespace {

int port_of(const std::string& endpoint) { return std::stoi(endpoint.substr(endpoint.rfind(':') + 1)); }

// One HTTP/1.1 request on a connection of its own; the whole answer, read until the server
// closes (every answer here says Connection: close). Bounded by a 10 s receive timeout.
std::string http(int port, const std::string& request) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  EXPECT_GE(fd, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0) {
    const std::string text = request + (request.find("Connection:") == std::string::npos ? "Connection: close\r\n\r\n" : "\r\n");
    EXPECT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) answer.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return answer;
}

const std::string health = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
std::string completion_request() {
  const std::string body = R"({"prompt": "Hi", "max_tokens": 3, "temperature": 0, "seed": 1})";
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         "Connection: close\r\n\r\n" + body;
}

TEST(HttpLoading, PortsAnswer503WhileLoadingThenTheServerTakesThemOver) {
  ServerOptions options;
  options.http = {"127.0.0.1:0"};
  HttpLoadingListeners loading(options);
  ASSERT_EQ(loading.endpoints().size(), 1u);
  ASSERT_EQ(loading.endpoints()[0].rfind("http://127.0.0.1:", 0), 0u);
  const int port = port_of(loading.endpoints()[0]);

  const std::string h = http(port, health);
  EXPECT_EQ(h.rfind("HTTP/1.1 503 ", 0), 0u) << h;
  EXPECT_NE(h.find("Retry-After: 1"), std::string::npos) << h;
  // The replica's name, as the server will give it: the host name and the HTTP port.
  const std::string replica = host_name() + ":" + std::to_string(port);
  EXPECT_NE(h.find(R"({"status":"loading","replica":")" + replica + R"("})"), std::string::npos) << h;
  EXPECT_NE(h.find("X-Lockstep-Replica: " + replica + "\r\n"), std::string::npos) << h;
  const std::string c = http(port, completion_request());
  EXPECT_EQ(c.rfind("HTTP/1.1 503 ", 0), 0u) << c;
  EXPECT_NE(c.find(R"("code":"loading")"), std::string::npos) << c;
  EXPECT_NE(c.find("loading its model"), std::string::npos) << c;
  // A client waiting on `Expect: 100-continue` (curl, for large bodies) gets its 503 at once,
  // before any body: it would otherwise wait to be told to send it.
  const auto asked = std::chrono::steady_clock::now();
  const std::string e = http(port, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                                   "Content-Length: 5000\r\nExpect: 100-continue\r\n");
  EXPECT_EQ(e.rfind("HTTP/1.1 503 ", 0), 0u) << e;
  EXPECT_EQ(e.find("100 Continue"), std::string::npos) << e;
  EXPECT_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(5));
  // A connection that sends nothing yet is closed when the Server takes over, not held.
  const int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  timeval tv{10, 0};
  ::setsockopt(idle, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // accepted by the loading loop

  // The model is loaded: the Server takes the same port over.
  const ModelConfig config = tiny_config(32);
  Server server(Model::from_parameters(config, init_parameters(config, 4)), options, loading);
  ASSERT_EQ(server.endpoints(), loading.endpoints());
  char byte;
  EXPECT_EQ(::recv(idle, &byte, 1, 0), 0) << "the loading loop's connection was left open";
  ::close(idle);
  // Before serve() runs its loop, a request waits in the listen backlog; then it is answered.
  std::string answer;
  std::thread early([&] { answer = http(port, health); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread serving([&] { server.serve(); });
  early.join();
  EXPECT_EQ(answer.rfind("HTTP/1.1 200 ", 0), 0u) << answer;
  const std::string done = http(port, completion_request());
  EXPECT_EQ(done.rfind("HTTP/1.1 200 ", 0), 0u) << done;
  server.stop();
  serving.join();
}

TEST(HttpLoading, NamedOriginsGetCorsHeadersAndPreflightsWhileLoading) {
  ServerOptions options;
  options.http = {"127.0.0.1:0"};
  options.http_options.cors_origins = {"http://app.example:3000"};
  HttpLoadingListeners loading(options);
  const int port = port_of(loading.endpoints()[0]);
  const std::string preflight = http(port, "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://app.example:3000\r\n"
                                           "Access-Control-Request-Method: POST\r\n"
                                           "Access-Control-Request-Headers: authorization, content-type\r\n");
  EXPECT_EQ(preflight.rfind("HTTP/1.1 204 ", 0), 0u) << preflight;
  EXPECT_NE(preflight.find("Access-Control-Allow-Origin: http://app.example:3000\r\n"), std::string::npos) << preflight;
  EXPECT_NE(preflight.find("Access-Control-Allow-Headers: authorization, content-type\r\n"), std::string::npos)
      << preflight;
  const std::string named = http(port, health + "Origin: http://app.example:3000\r\n");
  EXPECT_EQ(named.rfind("HTTP/1.1 503 ", 0), 0u) << named;
  EXPECT_NE(named.find("Access-Control-Allow-Origin: http://app.example:3000\r\n"), std::string::npos) << named;
  const std::string other = http(port, health + "Origin: http://evil.example\r\n");
  EXPECT_EQ(other.rfind("HTTP/1.1 503 ", 0), 0u) << other;
  EXPECT_EQ(other.find("Access-Control-Allow-Origin"), std::string::npos) << other;
  const std::string not_preflight = http(port, "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
                                               "Access-Control-Request-Method: POST\r\n");
  EXPECT_EQ(not_preflight.rfind("HTTP/1.1 503 ", 0), 0u) << not_preflight;
}

TEST(HttpLoading, RefusesWhatTheServerRefusesAndClosesItsPortsWhenDropped) {
  ServerOptions options;
  options.http = {"10.1.2.3:0"};
  EXPECT_THROW(HttpLoadingListeners{options}, Error);  // not loopback, no listen_any
  options.http = {"127.0.0.1:0"};
  int port = 0;
  {
    HttpLoadingListeners loading(options);
    port = port_of(loading.endpoints()[0]);
  }
  EXPECT_EQ(http(port, health), "") << "the port still answers after the listeners went";
}

}  // namespace
}  // namespace lockstep::test
