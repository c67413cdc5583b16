// The Server: the event loop, its listener, the connections and the way it stops.
//
// Threads: serve()'s caller runs the Asio event loop (every accept, read, write and timer), and
// the batcher's runner thread runs the model. That is all, however many connections are open.
#include "lockstep/server.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <utility>

#include <netinet/in.h>
#include <netinet/tcp.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "lockstep/chat_template.hpp"
#include "lockstep/tokenizer.hpp"
#include "serve/access_log.hpp"
#include "serve/batcher.hpp"
#include "serve/connection.hpp"
#include "serve/connection_slots.hpp"
#include "serve/endpoint.hpp"
#include "serve/generation_engine.hpp"
#include "serve/http_session.hpp"
#include "serve/loading.hpp"
#include "serve/metrics.hpp"
#include "serve/listener.hpp"
#include "serve/protocol.hpp"
#include "serve/server_options.hpp"
#include "serve/socket.hpp"

namespace lockstep {
namespace {

namespace asio = boost::asio;
using UnixListener = serve::Listener<asio::local::stream_protocol>;
using TcpListener = serve::Listener<asio::ip::tcp>;
using serve::endpoint_text;
using serve::parse_endpoint;

void no_delay(serve::StreamSocket& socket) {
  const int one = 1;
  ::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// The model's tokenizer for the HTTP API's text (null: none, no HTTP, or a model built in
// memory, which has no directory); a broken one refuses the start.
std::shared_ptr<const Tokenizer> http_tokenizer(const Model& model, const ServerOptions& o) {
  if (o.http.empty() || model.source().directory.empty()) return nullptr;
  return Tokenizer::for_model(model.source().directory);
}

// Its chat template for /v1/chat/completions (null: none, as above); a broken one refuses the start.
std::shared_ptr<const ChatTemplate> http_chat_template(const Model& model, const ServerOptions& o) {
  if (o.http.empty() || model.source().directory.empty()) return nullptr;
  return ChatTemplate::for_model(model.source().directory);
}

std::vector<uint8_t> frame_of_text(const std::string& text) {
  return serve::frame_of({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace

struct Server::Impl {
  // `loading` (null: none) holds the HTTP addresses' sockets, already bound.
  Impl(std::shared_ptr<const Model> m, ServerOptions o, HttpLoadingListeners::Impl* loading)
      : model(std::move(m)),
        options(serve::checked(o)),
        layout(model->config(), options.outputs, options.at),
        refusal_frame(frame_of_text(serve::refusal_handshake_json(
            "the server has " + std::to_string(options.max_connections) +
            " connections open, its limit, each with a call under way; try again later"))),
        cache(options.cache_bytes > 0 ? std::make_unique<PrefixCache>(model, PrefixCacheOptions{options.cache_bytes})
                                      : nullptr),
        strand(asio::make_strand(io)),
        wake_reader(strand),
        batcher(*model, layout, options.batch, options.call, cache.get()),
        context{layout, handshake_frame, batcher, calls, options.idle_timeout, options.idle_close},
        engine(options.http_options.max_active, options.http_options.max_queue, options.call, metrics, cache.get()),
        http_context{model,
                     serve::model_name(*model, options.http_options.model_name),
                     engine,
                     metrics,
                     [this] {
                       return std::pair<uint64_t, uint64_t>(batcher.rows_reused() + engine.rows_reused(),
                                                            batcher.rows_computed() + engine.rows_computed());
                     },
                     options.http_options.max_body,
                     options.http_options.read_timeout,
                     options.http_options.write_timeout,
                     options.http_options.api_key,
                     replica,
                     draining,
                     http_tokenizer(*model, options),
                     options.http_options.cors_origins,
                     {},        // hosts: once the addresses are bound
                     nullptr,   // access_log: opened then too
                     http_chat_template(*model, options)},
        drain_timer(strand) {
    // Structured output's vocabulary (its token trie), built once for every request.
    if (http_context.tokenizer) {
      http_context.vocabulary = TokenVocabulary::from_tokenizer(*http_context.tokenizer, model->config().vocab_size);
    } else if (!options.http.empty() && model->config().vocab_size == 256) {
      http_context.vocabulary = TokenVocabulary::bytes();
    }
    if (::pipe(wake) != 0)
      throw Error(ErrorKind::io, std::string("cannot create the stop pipe: ") + std::strerror(errno));
    for (int fd : wake) {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      ::fcntl(fd, F_SETFL, O_NONBLOCK);
    }
    try {
      // Every address is checked before any is bound.
      std::vector<asio::ip::tcp::endpoint> tcp, web;
      for (const std::string& a : options.listen) tcp.push_back(parse_endpoint(a, "--listen", options.listen_any));
      for (const std::string& a : options.http) web.push_back(parse_endpoint(a, "--http", options.listen_any));
      if (!options.socket_path.empty()) {
        socket_file = std::make_unique<serve::ListeningSocket>(options.socket_path, options.socket_mode);
        UnixListener::Acceptor acceptor(strand);
        acceptor.assign(asio::local::stream_protocol(), socket_file->release_fd());
        listener = std::make_shared<UnixListener>(io, std::move(acceptor),
                                                  [this](serve::StreamSocket s) { admit(std::move(s)); });
        endpoint_names.push_back("unix:" + options.socket_path);
      }
      for (const auto& e : tcp) {
        TcpListener::Acceptor acceptor = bind_tcp(e, "--listen");
        endpoint_names.push_back("tcp:" + endpoint_text(acceptor.local_endpoint()));
        tcp_listeners.push_back(std::make_shared<TcpListener>(io, std::move(acceptor), [this](serve::StreamSocket s) {
          no_delay(s);
          admit(std::move(s));
        }));
      }
      // Sockets bound while the model loaded are taken over (those left are closed on failure).
      struct Taken {
        std::vector<int> fds;
        ~Taken() {
          for (int fd : fds)
            if (fd >= 0) ::close(fd);
        }
      } taken;
      if (loading) {
        taken.fds = loading->take();
        if (taken.fds.size() != web.size())
          throw Error(ErrorKind::invalid_argument, "the loading listeners were bound for other --http addresses");
      }
      for (size_t i = 0; i < web.size(); ++i) {
        const asio::ip::tcp::endpoint& e = web[i];
        TcpListener::Acceptor acceptor = loading ? TcpListener::Acceptor(strand) : bind_tcp(e, "--http");
        if (loading) {
          boost::system::error_code ec;
          acceptor.assign(e.protocol(), std::exchange(taken.fds[i], -1), ec);
          if (ec) throw Error(ErrorKind::io, "--http " + endpoint_text(e) + ": cannot take over its socket: " + ec.message());
        }
        endpoint_names.push_back("http://" + endpoint_text(acceptor.local_endpoint()));
        http_listeners.push_back(std::make_shared<TcpListener>(io, std::move(acceptor), [this](serve::StreamSocket s) {
          no_delay(s);
          admit_http(std::move(s));
        }));
      }
      replica = options.replica.empty() ? serve::default_replica_name(endpoint_names, options.socket_path) : options.replica;
      http_busy = serve::busy_response(replica);
      http_context.hosts = serve::host_rules(options.http_options.allowed_hosts, web);
      if (!options.http_options.access_log.empty() && !web.empty()) {
        access_log = std::make_unique<serve::AccessLog>(options.http_options.access_log);
        http_context.access_log = access_log.get();
      }
      handshake = serve::handshake_json(*model, layout, replica);
      handshake_frame = frame_of_text(handshake);
      context.handshake_frame = handshake_frame;
      wake_reader.assign(wake[0]);
    } catch (...) {
      ::close(wake[0]);
      ::close(wake[1]);
      throw;
    }
  }
  ~Impl() {
    wake_reader.release();  // wake[0] is closed below, once
    ::close(wake[0]);
    ::close(wake[1]);
  }

  // On the strand: a new connection, served or refused.
  void admit(serve::StreamSocket socket);
  void admit_http(serve::StreamSocket socket);
  // An acceptor listening on `e` (port 0: a free one); throws Error naming the flag and address.
  TcpListener::Acceptor bind_tcp(const asio::ip::tcp::endpoint& e, const char* flag);
  // On the strand, while draining: waits for the generations, then closes the HTTP side.
  void drain_step();
  // On the strand: the stop, once.
  void begin_stop();

  std::shared_ptr<const Model> model;
  ServerOptions options;
  CallLayout layout;
  std::string replica;  // set once the listeners are bound, before any connection
  std::string handshake;
  std::vector<uint8_t> handshake_frame;
  std::vector<uint8_t> refusal_frame;
  std::string http_busy;  // the 503 of a connection refused at once (busy_response)
  std::unique_ptr<serve::AccessLog> access_log;  // --access-log; outlives the sessions below
  std::unique_ptr<PrefixCache> cache;  // before the batcher, which holds a pointer to it
  std::atomic<uint64_t> calls{0};
  // Everything below that holds sockets or posts to the loop is destroyed before the loop.
  // Concurrency hint 1: one thread runs the loop (serve()'s caller); the batcher's runner only
  // posts to it. Running it on more threads needs the hint raised, nothing else: every
  // connection and the registry below are on strands.
  asio::io_context io{1};
  asio::strand<asio::io_context::executor_type> strand;  // the listener, the registry, the stop
  asio::posix::stream_descriptor wake_reader;          // wake[0], waited on by the loop
  serve::Batcher batcher;
  serve::ConnectionContext context;
  int wake[2] = {-1, -1};  // stop() writes a byte to wake[1]
  std::unique_ptr<serve::ListeningSocket> socket_file;  // the path's rules and its removal
  std::shared_ptr<UnixListener> listener;  // null without a Unix socket
  std::vector<std::shared_ptr<TcpListener>> tcp_listeners, http_listeners;
  std::vector<std::string> endpoint_names;
  serve::Metrics metrics;
  std::atomic<bool> draining{false};
  serve::GenerationEngine engine;  // after the batcher: its runner ends first
  serve::HttpContext http_context;
  asio::steady_timer drain_timer;
  std::chrono::steady_clock::time_point drain_until;
  bool drain_aborted = false;
  // The open connections, by address (connection_slots.hpp); touched on the strand alone.
  serve::ConnectionSlots<serve::HttpSession> http_sessions{static_cast<size_t>(options.max_connections)};
  serve::ConnectionSlots<serve::HttpSession> limited_sessions{serve::kLimitedHttpSessions};
  serve::ConnectionSlots<serve::Connection> connections{static_cast<size_t>(options.max_connections)};
  bool stopping = false;
  bool served = false;
};

void Server::Impl::admit(serve::StreamSocket socket) {
  if (stopping) return;  // accepted as the stop began: the socket closes
  if (!connections.make_room()) return serve::refuse(socket, refusal_frame);  // every one has a call under way
  auto connection = std::make_shared<serve::Connection>(std::move(socket), context, [this](serve::Connection* c) {
    asio::post(strand, [this, c] { connections.remove(c); });
  });
  connections.add(connection);
  connection->start();
}

void Server::Impl::admit_http(serve::StreamSocket socket) {
  const bool room = http_sessions.make_room();
  if (!room && !limited_sessions.make_room()) {
    const std::span<const uint8_t> busy(reinterpret_cast<const uint8_t*>(http_busy.data()), http_busy.size());
    return serve::refuse(socket, busy);
  }
  auto& slots = room ? http_sessions : limited_sessions;
  auto session = std::make_shared<serve::HttpSession>(
      std::move(socket), http_context,
      [this, &slots](serve::HttpSession* s) { asio::post(strand, [&slots, s] { slots.remove(s); }); }, !room);
  slots.add(session);
  session->start();
}

TcpListener::Acceptor Server::Impl::bind_tcp(const asio::ip::tcp::endpoint& e, const char* flag) {
  TcpListener::Acceptor acceptor(strand);
  serve::listen_on(acceptor, e, flag);
  return acceptor;
}

void Server::Impl::begin_stop() {
  if (stopping) return;
  stopping = true;
  draining.store(true);
  if (listener) listener->close();
  for (auto& l : tcp_listeners) l->close();
  if (socket_file) socket_file->close_and_remove();
  connections.for_each([](serve::Connection& c) { c.stop(); });
  boost::system::error_code ec;
  wake_reader.cancel(ec);
  drain_until = std::chrono::steady_clock::now() + options.http_options.drain;
  drain_step();
}

void Server::Impl::drain_step() {
  if (engine.pending() > 0) {
    if (!drain_aborted && std::chrono::steady_clock::now() >= drain_until) {
      drain_aborted = true;
      engine.abort_all();  // the rest end with finish_reason "abort"
    }
    drain_timer.expires_after(std::chrono::milliseconds(20));
    drain_timer.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) drain_step();
    });
    return;
  }
  for (auto& l : http_listeners) l->close();
  for (auto* slots : {&http_sessions, &limited_sessions}) slots->for_each([](serve::HttpSession& s) { s.stop(); });
}

Server::Server(std::shared_ptr<const Model> model, ServerOptions options) {
  if (!model) throw Error(ErrorKind::invalid_argument, "Server needs a model");
  impl_ = std::make_unique<Impl>(std::move(model), std::move(options), nullptr);
}

Server::Server(std::shared_ptr<const Model> model, ServerOptions options, HttpLoadingListeners& loading) {
  if (!model) throw Error(ErrorKind::invalid_argument, "Server needs a model");
  impl_ = std::make_unique<Impl>(std::move(model), std::move(options), loading.impl_.get());
}

Server::~Server() = default;

const CallLayout& Server::layout() const { return impl_->layout; }
const std::string& Server::handshake() const { return impl_->handshake; }
const std::string& Server::replica() const { return impl_->replica; }
const ServerOptions& Server::options() const { return impl_->options; }
std::vector<std::string> Server::endpoints() const { return impl_->endpoint_names; }

ServerStats Server::stats() const {
  const serve::Metrics& http = impl_->metrics;
  return {impl_->calls.load(std::memory_order_relaxed), impl_->batcher.runs(), impl_->batcher.rows_computed(),
          impl_->batcher.rows_reused(), http.requests_answered(), http.generations_ended(),
          http.generation_tokens.load(std::memory_order_relaxed)};
}

void Server::stop() noexcept {
  const char byte = 1;
  [[maybe_unused]] ssize_t ignored = ::write(impl_->wake[1], &byte, 1);  // full pipe: already asked
}

ServerStats Server::serve() {
  Impl& m = *impl_;
  if (m.served) throw Error(ErrorKind::state, "Server::serve was already called");
  m.served = true;
  m.wake_reader.async_wait(asio::posix::stream_descriptor::wait_read, [&m](const boost::system::error_code&) {
    m.begin_stop();
  });
  if (m.listener) m.listener->start();
  for (auto& l : m.tcp_listeners) l->start();
  for (auto& l : m.http_listeners) l->start();
  // Returns once nothing is left to do: the stop closed the listener, and every connection has
  // closed (a connection whose call is with the batcher keeps the loop running).
  for (;;) {
    try {
      m.io.run();
      break;
    } catch (const std::exception&) {
      // A handler ran out of memory: that connection is lost, the others go on.
    }
  }
  return stats();
}

}  // namespace lockstep
