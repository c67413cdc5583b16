// The disconnect watch of a running completion (http_completions.cpp): a client that leaves,
// however it leaves, closes its connection, which cancels its generations (they leave the batch
// at the next step). A running completion reads nothing else from its connection, so the watch
// waits for the socket to become readable: the end of the connection, a reset, or bytes of a
// next (pipelined) request, which it reads ahead into the buffer the next request's parser reads
// first, so that an end behind them still shows.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>

#include "serve/http_session.hpp"

namespace lockstep::serve {

namespace {

// Whether the peer closed or reset the connection. POLLRDHUP reports the end of the peer's data
// even behind bytes not read yet (the first byte of a pipelined request, which MSG_PEEK would
// see instead of the end behind it); a reset is POLLERR or POLLHUP.
bool peer_left(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  while (::poll(&p, 1, 0) < 0)
    if (errno != EINTR) return true;
  return (p.revents & (POLLRDHUP | POLLERR | POLLHUP | POLLNVAL)) != 0;
}

}  // namespace

void HttpSession::watch_disconnect() {
  const uint64_t seq = request_seq_;
  socket_.async_wait(asio::socket_base::wait_read, [self = shared_from_this(), seq](const boost::system::error_code& ec) {
    if (ec || !self->completion_running(seq)) return;
    // The bytes of a pipelined request are read now, into the buffer its parser reads first:
    // left unread, they would wake this wait again at once (Asio re-arms the descriptor for a
    // wait) and hide the end of the connection behind them.
    switch (self->read_ahead()) {
      case ReadAhead::left: return self->close();  // its generations leave the batch
      case ReadAhead::full: return self->poll_disconnect();
      case ReadAhead::drained: return self->watch_disconnect();
    }
  });
}

HttpSession::ReadAhead HttpSession::read_ahead() {
  const int fd = socket_.native_handle();
  while (buffer_.size() < kMaxReadAhead) {
    const auto space = buffer_.prepare(std::min<size_t>(kMaxReadAhead - buffer_.size(), 16 << 10));
    const ssize_t n = ::recv(fd, space.data(), space.size(), MSG_DONTWAIT);
    if (n > 0) {
      buffer_.commit(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadAhead::drained;
    return ReadAhead::left;  // the end of the stream, or a reset
  }
  return peer_left(fd) ? ReadAhead::left : ReadAhead::full;
}

void HttpSession::poll_disconnect() {
  // kMaxReadAhead bytes wait already: the rest stays in the socket, and the end of the connection
  // is looked for every 100 ms instead (POLLRDHUP sees it behind unread bytes).
  auto timer = std::make_shared<asio::steady_timer>(socket_.get_executor(), std::chrono::milliseconds(100));
  timer->async_wait([self = shared_from_this(), timer, seq = request_seq_](const boost::system::error_code& ec) {
    if (ec || !self->completion_running(seq)) return;
    if (peer_left(self->socket_.native_handle())) return self->close();
    self->poll_disconnect();
  });
}

void HttpSession::cancel_generation() {
  if (finished_ >= choices_.size() || abandoned_) return;
  abandoned_ = true;
  for (Choice& c : choices_)
    if (!c.finish && c.job) context_.engine.cancel(*c.job);
}

}  // namespace lockstep::serve
