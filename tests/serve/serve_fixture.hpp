// Helpers for the end-to-end serve tests: the real `lockstep serve` process, a raw protocol
// client, and the in-process answer a call gets alone.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep::test {

// `lockstep init` of a tiny model (d_model 16, 2 layers, 2 heads, d_ff 32) at dir/name.
std::string make_tiny_model(const TempDir& dir, const std::string& name = "model", int length = 32,
                            uint64_t seed = 3);

// `lockstep serve ARGS...`, stdout and stderr captured in files.
class ServerProcess {
 public:
  // Starts the command, with `env` added to the environment, and waits until it prints its
  // "serving" line (the socket then accepts connections) or exits.
  explicit ServerProcess(const std::vector<std::string>& args,
                         const std::vector<std::pair<std::string, std::string>>& env = {});
  ~ServerProcess();  // SIGKILL and reap if still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool running();
  pid_t pid() const { return pid_; }
  std::string out() const;
  std::string err() const;
  // Sends `signo` (unless 0) and waits for the exit, at most `timeout_s`; the status is
  // WEXITSTATUS, 128 + the signal that killed it, or -1 on timeout (then killed).
  int stop(int signo, double timeout_s = 20);

 private:
  TempDir logs_;
  pid_t pid_ = -1;
  int status_ = -1;
};

// A protocol client on a blocking Unix socket.
// This machine's host name, as a server's default replica name starts.
std::string host_name();

class RawClient {
 public:
  // Connects and reads the handshake; throws std::runtime_error when it cannot.
  explicit RawClient(const std::string& socket_path);
  RawClient(const std::string& host, int port);  // the frame protocol over TCP (IPv4)
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  const nlohmann::json& handshake() const { return handshake_; }
  int fd() const { return fd_; }
  // Sends bytes as they are (false when the server is gone).
  bool send_raw(const std::string& bytes);
  bool send_frame(const std::string& body);
  // One frame, or nullopt at end of stream.
  std::optional<std::string> read_frame();
  // A call: its frame out, its answer (status byte then payload) back; throws at end of stream.
  std::string call(const std::string& input);
  // True when the server closed the connection (a read returns end of stream or reset).
  bool closed_by_server();
  void close();

 private:
  int fd_ = -1;
  nlohmann::json handshake_;
};

// Whether a Unix socket path connects.
bool socket_accepts(const std::string& path);
bool path_exists(const std::string& path);

// The answer (status byte 0 then the outputs, or 1 then the error) run_calls gives `input` alone.
std::string answer_alone(const Model& model, const CallLayout& layout, const std::string& input);

// `clients` concurrent clients, each its own connection on socket_path sending inputs(c) in order;
// answers[c] holds client c's answers, and failures counts the clients that threw.
struct ClientAnswers {
  std::vector<std::vector<std::string>> answers;
  int failures = 0;
};
ClientAnswers run_clients(const std::string& socket_path, int clients,
                          const std::function<std::vector<std::string>(int)>& inputs);

// A call's input bytes: ids then (with at) at.
std::string call_input(const std::vector<int32_t>& ids, std::optional<int32_t> at = std::nullopt);

// "lockstep serve: stopped by SIGTERM, 12 calls in 7 runs, 90 rows computed, 40 rows reused"
// -> {12, 7}; {-1, -1} when absent.
std::pair<int64_t, int64_t> stop_counts(const std::string& out, const std::string& signal_name);

}  // namespace lockstep::test
