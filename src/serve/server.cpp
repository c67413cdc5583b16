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

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>

#include "serve/batcher.hpp"
#include "serve/connection.hpp"
#include "serve/listener.hpp"
#include "serve/protocol.hpp"
#include "serve/socket.hpp"

namespace lockstep {
namespace {

namespace asio = boost::asio;
using UnixListener = serve::Listener<asio::local::stream_protocol>;

const ServerOptions& checked(const ServerOptions& o) {
  if (o.batch < 1 || o.batch > max_server_batch)
    throw Error(ErrorKind::invalid_argument, "batch must be in [1, " + std::to_string(max_server_batch) +
                                                 "], got " + std::to_string(o.batch));
  if (o.socket_mode > 0777)
    throw Error(ErrorKind::invalid_argument, "socket mode must be in 0..0777");
  if (o.max_connections < 1 || o.max_connections > max_server_connections)
    throw Error(ErrorKind::invalid_argument, "max connections must be in [1, " +
                                                 std::to_string(max_server_connections) + "], got " +
                                                 std::to_string(o.max_connections));
  if (o.idle_timeout.count() < 0 || o.idle_close.count() < 0)
    throw Error(ErrorKind::invalid_argument, "idle timeouts must be 0 (none) or positive");
  return o;
}

std::vector<uint8_t> frame_of_text(const std::string& text) {
  return serve::frame_of({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace

struct Server::Impl {
  Impl(std::shared_ptr<const Model> m, ServerOptions o)
      : model(std::move(m)),
        options(checked(o)),
        layout(model->config(), options.outputs, options.at),
        handshake(serve::handshake_json(*model, layout)),
        handshake_frame(frame_of_text(handshake)),
        refusal_frame(frame_of_text(serve::refusal_handshake_json(
            "the server has " + std::to_string(options.max_connections) +
            " connections open, its limit; try again later"))),
        cache(options.cache_bytes > 0 ? std::make_unique<PrefixCache>(model, PrefixCacheOptions{options.cache_bytes})
                                      : nullptr),
        strand(asio::make_strand(io)),
        wake_reader(strand),
        batcher(*model, layout, options.batch, options.call, cache.get()),
        context{layout, handshake_frame, batcher, calls, options.idle_timeout, options.idle_close} {
    if (::pipe(wake) != 0)
      throw Error(ErrorKind::io, std::string("cannot create the stop pipe: ") + std::strerror(errno));
    for (int fd : wake) {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      ::fcntl(fd, F_SETFL, O_NONBLOCK);
    }
    try {
      socket_file = std::make_unique<serve::ListeningSocket>(options.socket_path, options.socket_mode);
      UnixListener::Acceptor acceptor(strand);
      acceptor.assign(asio::local::stream_protocol(), socket_file->release_fd());
      listener = std::make_shared<UnixListener>(io, std::move(acceptor),
                                                [this](serve::StreamSocket s) { admit(std::move(s)); });
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
  // On the strand: the stop, once.
  void begin_stop();

  std::shared_ptr<const Model> model;
  ServerOptions options;
  CallLayout layout;
  std::string handshake;
  std::vector<uint8_t> handshake_frame;
  std::vector<uint8_t> refusal_frame;
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
  std::shared_ptr<UnixListener> listener;
  // The open connections, by address; touched on the strand alone.
  std::unordered_map<serve::Connection*, std::shared_ptr<serve::Connection>> connections;
  bool stopping = false;
  bool served = false;
};

void Server::Impl::admit(serve::StreamSocket socket) {
  if (stopping) return;  // accepted as the stop began: the socket closes
  if (connections.size() >= static_cast<size_t>(options.max_connections)) {
    serve::refuse(socket, refusal_frame);
    return;
  }
  auto connection = std::make_shared<serve::Connection>(std::move(socket), context, [this](serve::Connection* c) {
    asio::post(strand, [this, c] { connections.erase(c); });
  });
  connections.emplace(connection.get(), connection);
  connection->start();
}

void Server::Impl::begin_stop() {
  if (stopping) return;
  stopping = true;
  listener->close();
  socket_file->close_and_remove();
  for (auto& [address, connection] : connections) connection->stop();
  boost::system::error_code ec;
  wake_reader.cancel(ec);
}

Server::Server(std::shared_ptr<const Model> model, ServerOptions options) {
  if (!model) throw Error(ErrorKind::invalid_argument, "Server needs a model");
  impl_ = std::make_unique<Impl>(std::move(model), std::move(options));
}

Server::~Server() = default;

const CallLayout& Server::layout() const { return impl_->layout; }
const std::string& Server::handshake() const { return impl_->handshake; }
const ServerOptions& Server::options() const { return impl_->options; }

ServerStats Server::stats() const {
  return {impl_->calls.load(std::memory_order_relaxed), impl_->batcher.runs(), impl_->batcher.rows_computed(),
          impl_->batcher.rows_reused()};
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
  m.listener->start();
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
