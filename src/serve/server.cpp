// The Server: the listening socket, the accept loop, the connections and the way it stops.
#include "lockstep/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <system_error>

#include "serve/batcher.hpp"
#include "serve/connection.hpp"
#include "serve/protocol.hpp"
#include "serve/socket.hpp"

namespace lockstep {
namespace {

// How long stopping lets one answer's write block on a client that stopped reading. Runs in
// progress are always waited for.
constexpr int64_t kWriteGraceNs = 5'000'000'000;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

void set_flags(int fd) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
#ifdef SO_NOSIGPIPE  // where send has no MSG_NOSIGNAL
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof(one));
#endif
}

const ServerOptions& checked(const ServerOptions& o) {
  if (o.batch < 1 || o.batch > max_server_batch)
    throw Error(ErrorKind::invalid_argument, "batch must be in [1, " + std::to_string(max_server_batch) +
                                                 "], got " + std::to_string(o.batch));
  if (o.socket_mode > 0777)
    throw Error(ErrorKind::invalid_argument, "socket mode must be in 0..0777");
  return o;
}

}  // namespace

struct Server::Impl {
  Impl(std::shared_ptr<const Model> m, ServerOptions o)
      : model(std::move(m)),
        options(checked(o)),
        layout(model->config(), options.outputs, options.at),
        handshake(serve::handshake_json(*model, layout)),
        cache(options.cache_bytes > 0 ? std::make_unique<PrefixCache>(model, PrefixCacheOptions{options.cache_bytes})
                                      : nullptr),
        batcher(*model, layout, options.batch, options.call, cache.get()),
        context{layout, handshake, batcher, stopping, calls, finished_mutex, finished} {
    if (::pipe(wake) != 0)
      throw Error(ErrorKind::io, std::string("cannot create the stop pipe: ") + std::strerror(errno));
    for (int fd : wake) {
      ::fcntl(fd, F_SETFD, FD_CLOEXEC);
      ::fcntl(fd, F_SETFL, O_NONBLOCK);
    }
    try {
      socket = std::make_unique<serve::ListeningSocket>(options.socket_path, options.socket_mode);
    } catch (...) {
      ::close(wake[0]);
      ::close(wake[1]);
      throw;
    }
  }
  ~Impl() {
    finish();
    ::close(wake[0]);
    ::close(wake[1]);
  }

  void accept_one();
  void reap_finished();
  void finish() noexcept;

  std::shared_ptr<const Model> model;
  ServerOptions options;
  CallLayout layout;
  std::string handshake;
  std::unique_ptr<PrefixCache> cache;  // before the batcher, which holds a pointer to it
  serve::Batcher batcher;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> calls{0};
  std::mutex finished_mutex;
  std::condition_variable finished;
  serve::ConnectionContext context;
  int wake[2] = {-1, -1};  // stop() writes a byte; serve() polls the read end
  std::unique_ptr<serve::ListeningSocket> socket;
  std::list<std::unique_ptr<serve::Connection>> connections;  // the accept loop's alone
  bool served = false;
};

void Server::Impl::reap_finished() {
  for (auto it = connections.begin(); it != connections.end();)
    it = (*it)->finished() ? connections.erase(it) : std::next(it);
}

void Server::Impl::accept_one() {
  const int fd = ::accept(socket->fd(), nullptr, nullptr);
  if (fd < 0) {
    // Resource limits (EMFILE, ENOBUFS...) pass when connections end; wait a little instead of
    // spinning. EAGAIN, ECONNABORTED and EINTR need nothing.
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EINTR) {
      pollfd p{wake[0], POLLIN, 0};
      ::poll(&p, 1, 50);
    }
    return;
  }
  set_flags(fd);
  reap_finished();
  if (connections.size() >= static_cast<size_t>(max_server_connections)) {
    ::close(fd);
    return;
  }
  try {
    connections.push_back(std::make_unique<serve::Connection>(fd, context));
  } catch (const std::exception&) {
    // No thread or no memory for it: this connection alone is refused (the socket was closed).
  }
}

void Server::Impl::finish() noexcept {
  stopping.store(true, std::memory_order_release);
  if (socket) socket->close_and_remove();
  for (auto& c : connections) c->stop_reading();
  // Calls already read are run and answered; then each connection ends by itself. A write that
  // stays blocked past the grace (a client that stopped reading) is failed.
  const auto all_done = [&] {
    for (auto& c : connections)
      if (!c->finished()) return false;
    return true;
  };
  for (;;) {
    {
      std::unique_lock lock(finished_mutex);
      if (finished.wait_for(lock, std::chrono::milliseconds(100), all_done)) break;
    }
    for (auto& c : connections) {
      const int64_t since = c->writing_since();
      if (since != 0 && now_ns() - since > kWriteGraceNs) c->abort();
    }
  }
  connections.clear();  // joins
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
  pollfd fds[2] = {{m.wake[0], POLLIN, 0}, {m.socket->fd(), POLLIN, 0}};
  for (;;) {
    fds[0].revents = fds[1].revents = 0;
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      m.finish();
      throw Error(ErrorKind::io, std::string("poll failed: ") + std::strerror(err));
    }
    if (fds[0].revents) break;
    if (fds[1].revents) m.accept_one();
  }
  m.finish();
  return stats();
}

}  // namespace lockstep
