// The one way connections come in: a Listener accepts on any Asio stream acceptor and hands each
// connection, as a StreamSocket on its own strand, to the server's admit function. The Unix
// socket is Listener<asio::local::stream_protocol>; a TCP listener is Listener<asio::ip::tcp>
// on an acceptor bound to its address, with the same connections, batcher and stop behind it.
#pragma once

#include <fcntl.h>

#include <chrono>
#include <functional>
#include <memory>

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "serve/connection.hpp"

namespace lockstep::serve {

template <class Protocol>
class Listener : public std::enable_shared_from_this<Listener<Protocol>> {
 public:
  using Acceptor = asio::basic_socket_acceptor<Protocol, asio::any_io_executor>;
  // Called on the acceptor's executor for each accepted connection.
  using Admit = std::function<void(StreamSocket)>;

  // `acceptor` listens already; `io` runs the connections, each on a strand of its own.
  Listener(asio::io_context& io, Acceptor acceptor, Admit admit)
      : io_(io), acceptor_(std::move(acceptor)), retry_(acceptor_.get_executor()), admit_(std::move(admit)) {}

  // Accepts until close(). Any thread.
  void start() {
    asio::dispatch(acceptor_.get_executor(), [self = this->shared_from_this()] { self->accept(); });
  }
  // Stops accepting and closes the acceptor. Call on the acceptor's executor.
  void close() noexcept {
    boost::system::error_code ec;
    acceptor_.close(ec);
    try {
      retry_.cancel();
    } catch (...) {
    }
  }

 private:
  void accept() {
    acceptor_.async_accept(
        asio::make_strand(io_), [self = this->shared_from_this()](const boost::system::error_code& ec, auto socket) {
          if (!self->acceptor_.is_open()) return;  // closed: stopping
          if (ec) {
            // Resource limits (EMFILE, ENOBUFS...) pass when connections end: wait a little
            // instead of spinning. A connection aborted before its accept needs nothing.
            if (ec == asio::error::connection_aborted || ec == asio::error::interrupted) return self->accept();
            self->retry_.expires_after(std::chrono::milliseconds(50));
            self->retry_.async_wait([self](const boost::system::error_code& wait) {
              if (!wait && self->acceptor_.is_open()) self->accept();
            });
            return;
          }
          ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);  // accept() does not set it
          try {
            self->admit_(StreamSocket(std::move(socket)));
          } catch (const std::exception&) {
            // No memory for this connection: it alone is dropped (its socket closes).
          }
          self->accept();
        });
  }

  asio::io_context& io_;
  Acceptor acceptor_;
  asio::steady_timer retry_;
  Admit admit_;
};

}  // namespace lockstep::serve
