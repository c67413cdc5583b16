#include "serve/serve_fixture.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <regex>
#include <stdexcept>
#include <thread>

#include "format/json_text.hpp"

namespace lockstep::test {
namespace {

using Clock = std::chrono::steady_clock;

bool read_exact(int fd, void* p, size_t n) {
  auto* dst = static_cast<uint8_t*>(p);
  while (n > 0) {
    const ssize_t r = ::recv(fd, dst, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    dst += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return -1;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int connect_tcp(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return -1;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') return "localhost";
  return host;
}

std::string make_tiny_model(const TempDir& dir, const std::string& name, int length, uint64_t seed) {
  const std::string path = dir / name;
  const CommandResult r = run_command({LOCKSTEP_BINARY, "init", "--seed", std::to_string(seed), "--d-model", "16",
                                       "--n-layers", "2", "--n-heads", "2", "--d-ff", "32", "--length",
                                       std::to_string(length), "-o", path});
  if (r.status != 0) throw std::runtime_error("lockstep init failed: " + r.err);
  return path;
}

ServerProcess::ServerProcess(const std::vector<std::string>& args,
                             const std::vector<std::pair<std::string, std::string>>& env) {
  const std::string out = logs_ / "out", err = logs_ / "err";
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    // The test binary's mask and ignored signals would be inherited through exec.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int in = ::open("/dev/null", O_RDONLY);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    std::vector<std::string> argv = {LOCKSTEP_BINARY, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    ::execv(c[0], c.data());
    ::_exit(127);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    if (this->out().find("serving ") != std::string::npos || !running()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

ServerProcess::~ServerProcess() {
  if (running()) stop(SIGKILL, 5);
}

bool ServerProcess::running() {
  if (status_ >= 0) return false;
  int st = 0;
  if (::waitpid(pid_, &st, WNOHANG) != pid_) return true;
  status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return false;
}

std::string ServerProcess::out() const { return read_file(logs_ / "out"); }
std::string ServerProcess::err() const { return read_file(logs_ / "err"); }

int ServerProcess::stop(int signo, double timeout_s) {
  if (signo && running()) ::kill(pid_, signo);
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  while (running()) {
    if (Clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      status_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status_;
}

RawClient::RawClient(const std::string& socket_path) {
  fd_ = connect_to(socket_path);
  if (fd_ < 0) throw std::runtime_error("cannot connect to " + socket_path + ": " + std::strerror(errno));
  const auto frame = read_frame();
  if (!frame) throw std::runtime_error("no handshake from " + socket_path);
  handshake_ = lockstep::format::parse_json(*frame);
}

RawClient::RawClient(const std::string& host, int port) {
  const std::string where = host + ":" + std::to_string(port);
  fd_ = connect_tcp(host, port);
  if (fd_ < 0) throw std::runtime_error("cannot connect to " + where + ": " + std::strerror(errno));
  const auto frame = read_frame();
  if (!frame) throw std::runtime_error("no handshake from " + where);
  handshake_ = lockstep::format::parse_json(*frame);
}

RawClient::~RawClient() { close(); }

void RawClient::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawClient::send_raw(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

bool RawClient::send_frame(const std::string& body) {
  std::string frame(8, '\0');
  const uint64_t n = body.size();
  for (int i = 0; i < 8; ++i) frame[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  return send_raw(frame + body);
}

std::optional<std::string> RawClient::read_frame() {
  uint8_t header[8];
  if (!read_exact(fd_, header, 8)) return std::nullopt;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(header[i]) << (8 * i);
  if (n > (1u << 30)) throw std::runtime_error("absurd frame length from the server");
  std::string body(n, '\0');
  if (!read_exact(fd_, body.data(), n)) return std::nullopt;
  return body;
}

std::string RawClient::call(const std::string& input) {
  if (!send_frame(input)) throw std::runtime_error("the server is gone (send)");
  auto answer = read_frame();
  if (!answer) throw std::runtime_error("the server is gone (no answer)");
  return *answer;
}

bool RawClient::closed_by_server() {
  char c;
  for (;;) {
    const ssize_t r = ::recv(fd_, &c, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    return r == 0 || (r < 0 && errno == ECONNRESET);
  }
}

bool socket_accepts(const std::string& path) {
  const int fd = connect_to(path);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

ClientAnswers run_clients(const std::string& socket_path, int clients,
                          const std::function<std::vector<std::string>(int)>& inputs) {
  ClientAnswers result;
  result.answers.resize(static_cast<size_t>(clients));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      try {
        RawClient client(socket_path);
        for (const std::string& input : inputs(c)) result.answers[static_cast<size_t>(c)].push_back(client.call(input));
      } catch (const std::exception&) {
        failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  result.failures = failures.load();
  return result;
}

std::string answer_alone(const Model& model, const CallLayout& layout, const std::string& input) {
  std::string out(layout.output_bytes(), '\0');
  const std::span<const uint8_t> in_span(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  const std::span<uint8_t> out_span(reinterpret_cast<uint8_t*>(out.data()), out.size());
  const auto results = run_calls(model, layout, {&in_span, 1}, {&out_span, 1});
  return results[0].ok ? std::string(1, '\0') + out : std::string(1, '\1') + results[0].error;
}

std::string call_input(const std::vector<int32_t>& ids, std::optional<int32_t> at) {
  std::string s(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
  if (at) s.append(reinterpret_cast<const char*>(&*at), 4);
  return s;
}

std::pair<int64_t, int64_t> stop_counts(const std::string& out, const std::string& signal_name) {
  // Plain integers (docs/PROTOCOL.md): a count with a thousands separator does not match.
  const std::regex re("lockstep serve: stopped by " + signal_name +
                      ", ([0-9]+) calls? in ([0-9]+) runs?, [0-9]+ rows? computed, [0-9]+ rows? reused\n");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return {-1, -1};
  return {std::stoll(m[1]), std::stoll(m[2])};
}

}  // namespace lockstep::test
