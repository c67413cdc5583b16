// lockstep serve: a model behind a Unix socket (docs/PROTOCOL.md). Prints what it serves once
// the socket accepts connections; on SIGTERM, SIGINT or SIGHUP it stops (answering the calls
// already read), removes the socket, prints the calls answered and the runs they took, and exits
// 128 + the signal's number.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "cli/commands.hpp"
#include "cli/serve_flags.hpp"
#include "lockstep/server.hpp"

namespace lockstep::cli {
namespace {

const char* signal_name(int signo) {
  switch (signo) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    default: return "request";
  }
}

// Plain digits, no separators: scripts parse these lines with `(\d+) calls in (\d+) runs`.
std::string count(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// The stop signals. They are blocked in every thread (so before any thread starts, which then
// inherits the mask) and taken by one thread with sigwait. The library installs no handler.
sigset_t block_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&set, s);
  if (int err = pthread_sigmask(SIG_BLOCK, &set, nullptr))
    throw Error(ErrorKind::io, std::string("cannot block the stop signals: ") + std::strerror(err));
  return set;
}

// A thread that calls server.stop() for each stop signal, the ones pending before it started
// included. Destroy it before the server.
class SignalWatcher {
 public:
  SignalWatcher(const sigset_t& set, Server& server) : set_(set) {
    thread_ = std::thread([this, &server] {
      for (;;) {
        int signo = 0;
        if (sigwait(&set_, &signo) != 0) continue;
        if (quitting_.load()) return;
        int none = 0;
        received_.compare_exchange_strong(none, signo);
        server.stop();
      }
    });
  }
  ~SignalWatcher() {
    quitting_.store(true);
    pthread_kill(thread_.native_handle(), SIGTERM);  // blocked everywhere, so sigwait takes it
    thread_.join();
  }
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;
  // The first stop signal received, 0 if none.
  int received() const { return received_.load(); }

 private:
  const sigset_t set_;
  std::atomic<bool> quitting_{false};
  std::atomic<int> received_{0};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace

Run add_serve(CLI::App& app) {
  struct Flags {
    ModelFlags model;
    ServerOptions server;
    std::string precision;
    std::string socket_mode = "0600";
    int64_t cache_mb = 256;
    bool no_cache = false;
    double idle_timeout_s = 60;
    double idle_close_s = 0;
    int64_t max_body = int64_t{1} << 20;
    double read_timeout_s = 30, write_timeout_s = 30, drain_s = 30;
    std::string api_key_file;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("serve", "serve a model on a Unix socket, TCP and/or HTTP, batching calls");
  f->model.add_to(*cmd, "LOCATION");
  cmd->add_option("--socket", f->server.socket_path, "the Unix socket to listen on");
  cmd->add_option("--listen", f->server.listen,
                  "the frame protocol over TCP on HOST:PORT (port 0: any free one); repeatable")
      ->allow_extra_args(false);
  cmd->add_option("--http", f->server.http,
                  "the HTTP API (OpenAI-compatible completions, /health, /metrics, playground) on HOST:PORT; "
                  "repeatable")
      ->allow_extra_args(false);
  cmd->add_flag("--listen-any", f->server.listen_any,
                "allow non-loopback addresses for --listen and --http: the frame protocol has no authentication "
                "(HTTP only with --api-key-file), so anyone who can reach the port can use the model");
  cmd->add_option("--http-batch", f->server.http_options.max_active, "most HTTP generations decoded together")
      ->capture_default_str();
  cmd->add_option("--max-queue", f->server.http_options.max_queue,
                  "HTTP generations that may wait for a place in the batch; more get 429")
      ->capture_default_str();
  cmd->add_option("--max-body", f->max_body, "largest HTTP request body in bytes; larger gets 413")->capture_default_str();
  cmd->add_option("--read-timeout", f->read_timeout_s, "SECONDS for an HTTP request to arrive in full (0: never)")
      ->capture_default_str();
  cmd->add_option("--write-timeout", f->write_timeout_s, "SECONDS an HTTP client may take to read a write (0: never)")
      ->capture_default_str();
  cmd->add_option("--drain-seconds", f->drain_s,
                  "at SIGTERM/SIGINT, SECONDS active HTTP generations may take to finish; then they end with "
                  "finish_reason \"abort\"")
      ->capture_default_str();
  cmd->add_option("--api-key-file", f->api_key_file,
                  "a file whose first line is the key HTTP clients must send as 'Authorization: Bearer KEY' on /v1/* "
                  "and the tokenizer endpoints; only its owner may read it (chmod 600)");
  cmd->add_option("--model-name", f->server.http_options.model_name, "the model's name in the HTTP API");
  cmd->add_option("--cors-origin", f->server.http_options.cors_origins,
                  "a browser ORIGIN (http[s]://host[:port]) whose pages may call the HTTP API, or * for any; "
                  "repeatable (default: none)")
      ->allow_extra_args(false);
  cmd->add_option("--allowed-host", f->server.http_options.allowed_hosts,
                  "a host NAME (or address) HTTP requests may give in their Host header besides localhost, "
                  "127.x.x.x, [::1] and the --http address, such as the name a proxy or DNS serves this under; "
                  "* for any (a proxy that rewrites Host); repeatable. Other Hosts get 403: a DNS-rebinding page "
                  "sends its own name")
      ->allow_extra_args(false);
  cmd->add_option("--access-log", f->server.http_options.access_log,
                  "append a line per HTTP request to FILE: time, client, method, path, status, bytes, seconds, "
                  "replica (never a body)");
  cmd->add_option("--max-connections", f->server.max_connections,
                  "most connections open at once, frame protocol and HTTP each; at the limit the least recently "
                  "active idle one is closed to make room, and only when none is idle is a new one refused")
      ->capture_default_str();
  cmd->add_option("--name", f->server.replica,
                  "this replica's name: in /health, /metrics, the X-Lockstep-Replica header and the handshake; "
                  "1-128 printable ASCII characters, no space, quote or backslash "
                  "(default: the host name and the first bound port)");
  cmd->add_option("--batch", f->server.batch, "most calls run together on the device")->capture_default_str();
  cmd->add_option("--output", f->server.outputs, "only this output, repeatable, in the order given")
      ->allow_extra_args(false);  // one name per --output, so a LOCATION after it stays one
  cmd->add_flag("--at", f->server.at, "a last input `at` i32 [1]; each output only at that position");
  cmd->add_option("--precision", f->precision, "bf16: matmul operands rounded to bf16");
  cmd->add_option("--socket-mode", f->socket_mode, "permission bits of the socket, octal")->capture_default_str();
  cmd->add_option("--cache-mb", f->cache_mb, "prefix cache size in MiB (keys and values of computed rows)")
      ->capture_default_str();
  cmd->add_flag("--no-cache", f->no_cache, "no prefix cache: every call computes from position 0");
  cmd->add_option("--idle-timeout", f->idle_timeout_s,
                  "close a connection that sent part of a frame and then nothing for SECONDS (0: never)")
      ->capture_default_str();
  cmd->add_option("--idle-close", f->idle_close_s,
                  "close a connection with no call in flight after SECONDS idle (0: never)")
      ->capture_default_str();
  return [f] {
    ServerOptions options = f->server;
    if (options.batch < 1 || options.batch > max_server_batch)
      throw Error(ErrorKind::invalid_argument, "--batch must be in [1, " + std::to_string(max_server_batch) +
                                                   "], got " + std::to_string(options.batch));
    options.socket_mode = parse_socket_mode(f->socket_mode);
    if (!options.replica.empty()) check_replica_name(options.replica);
    if (options.max_connections < 1 || options.max_connections > max_server_connections)
      throw Error(ErrorKind::invalid_argument, "--max-connections must be in [1, " +
                                                   std::to_string(max_server_connections) + "], got " +
                                                   std::to_string(options.max_connections));
    if (f->cache_mb < 0 || f->cache_mb > (int64_t{1} << 20))
      throw Error(ErrorKind::invalid_argument, "--cache-mb must be in [0, 1048576], got " + std::to_string(f->cache_mb));
    options.cache_bytes = f->no_cache ? 0 : static_cast<size_t>(f->cache_mb) << 20;
    options.idle_timeout = idle_seconds("--idle-timeout", f->idle_timeout_s);
    options.idle_close = idle_seconds("--idle-close", f->idle_close_s);
    if (options.socket_path.empty() && options.listen.empty() && options.http.empty())
      throw Error(ErrorKind::invalid_argument, "serve needs --socket PATH, --listen HOST:PORT or --http HOST:PORT");
    if (f->max_body < 1 || f->max_body > (int64_t{1} << 32))
      throw Error(ErrorKind::invalid_argument, "--max-body must be in [1, 4294967296] bytes, got " + std::to_string(f->max_body));
    options.http_options.max_body = static_cast<size_t>(f->max_body);
    options.http_options.read_timeout = idle_seconds("--read-timeout", f->read_timeout_s);
    options.http_options.write_timeout = idle_seconds("--write-timeout", f->write_timeout_s);
    options.http_options.drain = idle_seconds("--drain-seconds", f->drain_s);
    if (!f->api_key_file.empty()) options.http_options.api_key = read_api_key(f->api_key_file);
    for (const std::string& origin : options.http_options.cors_origins) check_cors_origin(origin);
    LoadOptions load = f->model.load_options();
    if (load.device == Device::cuda)
      throw Error(ErrorKind::unsupported, "serve does not run on device 'cuda' yet (its sessions and batching are the "
                                          "second part of issue 41); lockstep call and bench run on it");
    if (!f->precision.empty()) load.precision = parse_precision(f->precision);
    raise_file_limit(options);
    const sigset_t stop_signals = block_stop_signals();  // before the model's threads exist
    ::signal(SIGPIPE, SIG_IGN);  // a vanished client or stdout reader is an error return, not a kill
    // The HTTP ports open first and answer 503 while the model loads (a load balancer sees the
    // replica coming up); the Server takes them over.
    std::unique_ptr<HttpLoadingListeners> loading;
    if (!options.http.empty()) {
      loading = std::make_unique<HttpLoadingListeners>(options);
      std::string where;
      for (const std::string& e : loading->endpoints()) where += (where.empty() ? "" : " and ") + e;
      std::fprintf(stderr, "lockstep serve: loading %s; %s answers 503 until it is ready\n", f->model.path.c_str(),
                   where.c_str());
    }
    const std::shared_ptr<const Model> model = Model::load(f->model.path, load);
    Server server = loading ? Server(model, std::move(options), *loading) : Server(model, std::move(options));
    const ServerOptions& o = server.options();
    // What listens, and how. The frame protocol's line is the reference document's own
    // (docs/SPEC-NOTES.md), its calls' tensors below it; with --http, each address says which
    // protocol it speaks, so that an HTTP-only server does not describe frames it never takes.
    const std::vector<std::string> endpoints = server.endpoints();
    const auto is_http = [](const std::string& e) { return e.rfind("http://", 0) == 0; };
    const bool http = std::any_of(endpoints.begin(), endpoints.end(), is_http);
    const bool frames = !std::all_of(endpoints.begin(), endpoints.end(), is_http);
    std::string where;
    const std::string calls = "up to " + count(static_cast<uint64_t>(o.batch), "call", "calls") + " a run";
    for (const std::string& e : endpoints) {
      if (!where.empty()) where += " and ";
      where += e.rfind("unix:", 0) == 0 ? e.substr(5) : e;
      if (!http) continue;
      where += is_http(e) ? " (HTTP, the OpenAI API: up to " +
                             count(static_cast<uint64_t>(o.http_options.max_active), "generation", "generations") +
                             " a step)"
                       : " (frames: " + calls + ")";
    }
    std::printf("serving %s on %s%s\n", model->source().directory.c_str(), where.c_str(),
                http ? "" : (", " + calls).c_str());
    if (frames) std::fputs(io_lines(server.layout().inputs(), server.layout().outputs()).c_str(), stdout);
    std::fflush(stdout);
    SignalWatcher watcher(stop_signals, server);
    const ServerStats stats = server.serve();
    const int signo = watcher.received();
    std::string http_counts;
    if (http)
      http_counts = "; " + count(stats.http_requests, "HTTP request", "HTTP requests") + ", " +
             count(stats.generations, "generation", "generations") + " of " +
             count(stats.generated_tokens, "token", "tokens");
    std::printf("lockstep serve: stopped by %s, %s in %s, %s computed, %s reused%s\n", signal_name(signo),
                count(stats.calls, "call", "calls").c_str(), count(stats.runs, "run", "runs").c_str(),
                count(stats.rows_computed, "row", "rows").c_str(), count(stats.rows_reused, "row", "rows").c_str(),
                http_counts.c_str());
    std::fflush(stdout);
    return signo ? 128 + signo : 0;
  };
}

}  // namespace lockstep::cli
