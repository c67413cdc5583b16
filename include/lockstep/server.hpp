// A model behind a Unix socket (docs/PROTOCOL.md): connections served side by side, calls that
// arrive while the model is busy run together as one batch when it is free, each call's answer
// with the bits it would get alone.
//
// Connections are served by one event loop (Boost.Asio) on the thread that calls serve(), and
// the model runs on one runner thread; an idle connection costs no thread.
//
// The Server holds everything it uses (socket, connections, queue); it installs no signal
// handlers and never sees argv. The command (`lockstep serve`) turns signals into stop().
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

// The protocol version the handshake announces; a client refuses any other.
inline constexpr int protocol_version = 1;

inline constexpr int max_server_batch = 1024;
// Connections open at once, by default and at most (frame protocol and HTTP, each). At the limit
// the least recently active idle connection is closed to make room; only when none is idle is a
// new one refused (a frame connection's handshake has an "error" field; HTTP answers 503).
inline constexpr int max_server_connections = 1024;

// The HTTP API's limits (docs/HTTP.md).
struct HttpOptions {
  size_t max_body = size_t{1} << 20;  // a larger request body is answered 413
  int max_active = 64;                // generations decoded together in one batched step
  int max_queue = 256;                // more generations waiting than this: 429
  // A request's head and body must arrive within this of the previous response (or of the
  // connect), so an idle keep-alive connection is closed after it too; 0: never.
  std::chrono::milliseconds read_timeout{30'000};
  std::chrono::milliseconds write_timeout{30'000};  // one write to a client that stopped reading
  std::chrono::milliseconds drain{30'000};  // at stop, active generations finish within this
  std::string api_key;                      // "": none; else /v1/* needs "Bearer KEY" (401)
  std::string model_name;                   // "": the model directory's name
  // Browser origins (scheme://host[:port]) whose pages may call the API (CORS); "*": any.
  // Empty: none, and no CORS header is sent. A browser's request from any other origin is 403.
  std::vector<std::string> cors_origins;
  // Host names a request's Host may give besides loopback ones and the bound addresses ("*":
  // any), for names that reach the server through DNS or a proxy; any other Host is 403
  // (a DNS-rebinding page sends its own name).
  std::vector<std::string> allowed_hosts;
  std::string access_log;  // a file to append a line to per request (docs/HTTP.md); "": none
};

struct ServerOptions {
  // Where to listen: any combination, at least one. TCP and HTTP addresses are HOST:PORT with a
  // numeric host (or "localhost"); port 0 picks a free port (endpoints() tells which). They
  // must be loopback addresses unless listen_any: neither the frame protocol nor (without
  // an API key) HTTP authenticates anyone.
  std::string socket_path;           // the Unix socket to listen on; "": none
  std::vector<std::string> listen;   // the frame protocol over TCP
  std::vector<std::string> http;     // the HTTP API
  bool listen_any = false;
  // This server's name among replicas (docs/SCALING.md): in the handshake's `replica` field, in
  // /health, as the `replica` label of every /metrics sample and in each HTTP response's
  // X-Lockstep-Replica header. "": the host name and the first bound port (HTTP, else TCP), or
  // the host name and the socket path.
  std::string replica;
  HttpOptions http_options;
  int batch = 1;                     // most calls run together, 1..max_server_batch
  std::vector<std::string> outputs;  // outputs in the order wanted; every output when empty
  bool at = false;                   // a last input `at` i32 [1]; outputs at that position only
  unsigned socket_mode = 0600;       // permission bits of the socket file, 0..0777
  CallOptions call;                  // device and threads of each run
  // The prefix cache's budget (include/lockstep/prefix_cache.hpp); 0: no cache. The cache works
  // on the cpu device; on the reference device every call computes from position 0.
  size_t cache_bytes = size_t{256} << 20;
  // Connections open at once, 1..max_server_connections: frame connections (the socket and the
  // TCP listeners together) and HTTP connections, each.
  int max_connections = max_server_connections;
  // A connection that has sent part of a frame and then nothing for this long is closed; the
  // clock restarts whenever bytes arrive. 0: never.
  std::chrono::milliseconds idle_timeout{60'000};
  // A connection with no call in flight and no partial frame is closed after this long. 0: never.
  std::chrono::milliseconds idle_close{0};
};

// Throws Error (naming --name) unless `name` is fit to be a replica's name: 1 to 128 printable
// ASCII characters other than space, '"' and '\\'. It goes into HTTP headers, where a line end
// would add headers of the caller's choosing to every response.
void check_replica_name(const std::string& name);

struct ServerStats {
  uint64_t calls = 0;  // call frames answered, errors included
  uint64_t runs = 0;   // runs of the model that computed at least one call
  uint64_t rows_computed = 0;  // rows the model computed for the calls
  uint64_t rows_reused = 0;    // rows the prefix cache supplied instead
  // With --http:
  uint64_t http_requests = 0;     // HTTP requests answered, any status
  uint64_t generations = 0;       // generations ended (one per choice of a completion)
  uint64_t generated_tokens = 0;  // tokens they generated
};

class HttpLoadingListeners;

class Server {
 public:
  // Checks the options (an unknown output is refused listing the model's outputs), then binds
  // and listens on the socket:
  //   - a socket file no process listens on (left by a stopped server) is replaced;
  //   - a socket another process serves is refused;
  //   - a path holding anything but a socket is refused.
  // Throws Error naming the path and the reason. Clients can connect once this returns.
  Server(std::shared_ptr<const Model> model, ServerOptions options);
  // The same, taking over `loading`'s sockets (bound for the same options.http) instead of
  // binding the HTTP addresses again: the ports answered 503 while the model loaded.
  Server(std::shared_ptr<const Model> model, ServerOptions options, HttpLoadingListeners& loading);
  // Stops, waits for the connections to end and removes the socket if serve() did not.
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const CallLayout& layout() const;
  // The handshake every connection reads first, as JSON text.
  const std::string& handshake() const;
  const ServerOptions& options() const;
  // The replica name in use (ServerOptions::replica, or the default made from the bound address).
  const std::string& replica() const;
  // Where it listens, with the ports bound: "unix:PATH", "tcp:HOST:PORT", "http://HOST:PORT".
  std::vector<std::string> endpoints() const;

  // Accepts and serves until stop(), running the event loop on the calling thread. Then it stops
  // accepting, removes the socket, reads no further call, answers the calls already read, closes
  // every connection gracefully (docs/PROTOCOL.md, "Stopping") and returns the counts. Call it
  // once. With HTTP, the stop first drains: /health and new requests get 503, active generations
  // finish (at most http_options.drain, then they end with finish_reason "abort").
  ServerStats serve();
  // Makes serve() return as above; callable from any thread, any number of times, before or
  // during serve(). Async-signal-safe: it writes one byte to a pipe.
  void stop() noexcept;
  // The counts so far; callable from any thread.
  ServerStats stats() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The HTTP addresses of a server, bound before its model is loaded (which can take minutes):
// until a Server takes them over, on a thread of their own, each answers GET /health with 503
// {"status": "loading"} and any other request with 503 in OpenAI's error shape (code
// "loading"), `Retry-After: 1`, one request per connection. A load balancer or client sees the
// replica coming up, not a refused connection; requests arriving while the Server takes over
// wait in the listen backlog. The frame protocol's sockets are bound by the Server itself.
class HttpLoadingListeners {
 public:
  // Binds options.http (the Server's rules: loopback unless listen_any; port 0 picks one) and
  // starts answering. Throws Error naming an address it cannot use.
  explicit HttpLoadingListeners(const ServerOptions& options);
  // Stops answering; closes the sockets a Server did not take.
  ~HttpLoadingListeners();
  HttpLoadingListeners(const HttpLoadingListeners&) = delete;
  HttpLoadingListeners& operator=(const HttpLoadingListeners&) = delete;

  // "http://HOST:PORT" with the ports bound, in the order of options.http.
  std::vector<std::string> endpoints() const;

  struct Impl;

 private:
  friend class Server;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
