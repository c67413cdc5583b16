#include "serve/connection.hpp"

#include <algorithm>
#include <exception>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/write.hpp>

#include "serve/protocol.hpp"

namespace lockstep::serve {
namespace {

using Clock = std::chrono::steady_clock;
using boost::system::error_code;

// Each recv takes up to this much; a pipelining client's next frames wait here, parsed one call
// at a time. The bound on what a connection holds besides its call's input and output.
constexpr size_t kReadBufferBytes = 8 * 1024;
// How long stopping lets one write stay blocked on a client that stopped reading.
constexpr auto kWriteGrace = std::chrono::seconds(5);
// A graceful close waits for the client's end of stream this long at most, and this long after
// the last bytes the client sent (what it sent before it saw our end of stream).
constexpr auto kDrainMax = std::chrono::seconds(1);
constexpr auto kDrainQuiet = std::chrono::milliseconds(100);
// The final discard reads at most this many times 4 KiB: a socket's receive queue is bounded.
constexpr int kDiscardReads = 512;

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// Closes so that the peer sees a clean end of stream after everything already sent, never
// ECONNRESET. A Unix socket closed with unread bytes in its receive queue resets its peer: the
// peer's next read, once it has read what was queued for it, fails with ECONNRESET instead of
// returning 0. That was issue 16's defect 8 (a stop met clients still pipelining calls).
// Shutting down reading first makes the peer's further sends fail with EPIPE, so once the queue
// is read empty nothing more can arrive before the close.
void close_without_reset(StreamSocket& socket) noexcept {
  error_code ec;
  socket.shutdown(asio::socket_base::shutdown_both, ec);
  socket.non_blocking(true, ec);
  std::array<uint8_t, 4096> discard;
  for (int i = 0; i < kDiscardReads && !ec; ++i) socket.read_some(asio::buffer(discard), ec);
  socket.close(ec);
}

}  // namespace

void refuse(StreamSocket& socket, std::span<const uint8_t> frame) noexcept {
  error_code ec;
  socket.non_blocking(true, ec);
  // A fresh socket's send buffer takes a refusal of ~100 bytes whole; if not, the client sees the
  // connection end without it, as before the refusal existed.
  if (!ec) socket.write_some(asio::buffer(frame.data(), frame.size()), ec);
  close_without_reset(socket);
}

Connection::Connection(StreamSocket socket, const ConnectionContext& context, Closed on_closed)
    : socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      context_(context),
      on_closed_(std::move(on_closed)),
      parser_(context.layout.input_bytes()),
      buffer_(kReadBufferBytes) {}

void Connection::start() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    self->write(self->context_.handshake_frame, {}, false);
  });
}

void Connection::stop() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->on_stop(); });
}

void Connection::evict() {
  asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
    if (self->phase_ != Phase::reading || !self->idle() || self->stopping_) return;
    self->cancelled_ = Cancel::idle;
    error_code ec;
    self->socket_.cancel(ec);  // on_read then closes gracefully
  });
}

void Connection::on_stop() {
  if (stopping_ || phase_ == Phase::closed) return;
  stopping_ = true;
  error_code ec;
  switch (phase_) {
    case Phase::reading:  // between calls or mid-frame: no call is owed
      cancelled_ = Cancel::stop;
      socket_.cancel(ec);
      break;
    case Phase::writing:
      arm(kWriteGrace);
      break;
    case Phase::running:   // the answer's write will be bounded by the grace
    case Phase::draining:  // already closing
    case Phase::closed:
      break;
  }
}

void Connection::read_calls() {
  if (stopping_) return close_gracefully();
  // One call at a time: a call frame already buffered behind this one waits until its answer is
  // written, so answers keep the calls' order and a connection holds one call's buffers.
  const CallFrameParser::Step step = parser_.feed({buffer_.data() + begin_, end_ - begin_});
  begin_ += step.consumed;
  if (step.event == CallFrameParser::Event::call) return submit_call();
  if (step.event == CallFrameParser::Event::wrong_length) {
    // Its body is never read: the length alone is wrong, and it may be absurd. The answer says
    // so; then the connection ends.
    try {
      result_.error = wrong_length_message(context_.layout, parser_.announced());
    } catch (...) {
      return close_now();
    }
    context_.calls.fetch_add(1, std::memory_order_relaxed);
    answer_prefix_ = answer_prefix(AnswerStatus::error, result_.error.size());
    return write(answer_prefix_, bytes_of(result_.error), true);
  }
  begin_ = end_ = 0;  // the parser took every byte
  phase_ = Phase::reading;
  cancelled_ = Cancel::none;
  if (!parser_.partial()) {
    last_active_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    idle_.store(true, std::memory_order_relaxed);
  }
  // The timer restarts with every read, so a slow client that keeps sending is never cut off.
  const std::chrono::milliseconds limit = parser_.partial() ? context_.idle_timeout : context_.idle_close;
  if (limit.count() > 0) arm(limit);
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const error_code& ec, size_t n) {
    self->on_read(ec, n);
  });
}

void Connection::on_read(const error_code& ec, size_t n) {
  idle_.store(false, std::memory_order_relaxed);
  disarm();
  if (phase_ == Phase::closed) return;
  if (ec) {
    if (cancelled_ != Cancel::none) return close_gracefully();  // the stop or an idle timeout
    // The client's end of stream (mid-frame or not: no answer is owed), or a failed socket.
    return ec == asio::error::eof ? finish_close() : close_now();
  }
  end_ = n;
  read_calls();
}

void Connection::submit_call() {
  phase_ = Phase::running;
  try {
    if (output_.size() != context_.layout.output_bytes()) output_.resize(context_.layout.output_bytes());
    work_ = asio::prefer(socket_.get_executor(), asio::execution::outstanding_work.tracked);
    auto self = shared_from_this();
    context_.batcher.submit(parser_.input(), output_, [self, ex = socket_.get_executor()](CallResult result) {
      // On the runner thread: hand the result to the connection's strand and go on.
      asio::post(ex, [self, result = std::move(result)]() mutable { self->on_result(std::move(result)); });
    });
  } catch (const std::exception&) {
    work_ = {};
    close_now();  // no memory for this connection's buffers: it alone is dropped
  }
}

void Connection::on_result(CallResult result) {
  work_ = {};
  parser_.next();
  context_.calls.fetch_add(1, std::memory_order_relaxed);
  result_ = std::move(result);
  if (result_.ok) {
    answer_prefix_ = answer_prefix(AnswerStatus::ok, output_.size());
    return write(answer_prefix_, output_, false);
  }
  if (result_.error.empty()) result_.error = "the server failed to run this call";
  answer_prefix_ = answer_prefix(AnswerStatus::error, result_.error.size());
  write(answer_prefix_, bytes_of(result_.error), false);
}

// async_write sends every byte of the frame or fails; after a failure nothing more is written
// (the socket is closed), so the client sees each frame whole or the connection end mid-frame,
// never one frame's bytes followed by another's.
void Connection::write(std::span<const uint8_t> prefix, std::span<const uint8_t> body, bool then_close) {
  phase_ = Phase::writing;
  if (stopping_) arm(kWriteGrace);
  const std::array<asio::const_buffer, 2> frame = {asio::buffer(prefix.data(), prefix.size()),
                                                   asio::buffer(body.data(), body.size())};
  asio::async_write(socket_, frame, [self = shared_from_this(), then_close](const error_code& ec, size_t) {
    self->disarm();
    if (self->phase_ == Phase::closed) return;  // abandoned past the grace
    if (ec) return self->close_now();           // the client is gone
    if (then_close) return self->finish_close();
    self->read_calls();
  });
}

// After the last answer: our end of stream first, so the client reads every answer and then a
// clean end; then what the client still sends is read and dropped until its own end of stream,
// a pause of kDrainQuiet or kDrainMax in all; then the close.
void Connection::close_gracefully() {
  phase_ = Phase::draining;
  error_code ec;
  socket_.shutdown(asio::socket_base::shutdown_send, ec);
  drain_until_ = Clock::now() + kDrainMax;
  drain();
}

void Connection::drain() {
  const Clock::time_point now = Clock::now();
  if (now >= drain_until_) return finish_close();
  arm(std::min<Clock::duration>(kDrainQuiet, drain_until_ - now));
  socket_.async_read_some(asio::buffer(buffer_), [self = shared_from_this()](const error_code& ec, size_t) {
    self->disarm();
    if (self->phase_ == Phase::closed) return;
    if (ec) return self->finish_close();  // end of stream, or the deadline cancelled the read
    self->drain();
  });
}

void Connection::finish_close() noexcept {
  disarm();
  close_without_reset(socket_);
  close_now();
}

void Connection::close_now() noexcept {
  disarm();
  error_code ec;
  socket_.close(ec);
  phase_ = Phase::closed;
  if (on_closed_) {
    Closed closed = std::move(on_closed_);
    on_closed_ = nullptr;
    closed(this);
  }
}

void Connection::arm(Clock::duration after) {
  const uint64_t generation = ++deadline_generation_;
  deadline_.expires_after(after);
  deadline_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
    if (!ec && generation == self->deadline_generation_) self->on_deadline();
  });
}

void Connection::disarm() noexcept {
  ++deadline_generation_;  // enough on its own: a stale deadline does nothing when it fires
  try {
    deadline_.cancel();
  } catch (...) {
  }
}

void Connection::on_deadline() {
  error_code ec;
  switch (phase_) {
    case Phase::reading:  // idle past a timeout
      cancelled_ = Cancel::idle;
      socket_.cancel(ec);
      break;
    case Phase::writing:  // stopping, and the client has not read its answer within the grace
      close_now();
      break;
    case Phase::draining:  // the drain's bounds
      socket_.cancel(ec);
      break;
    case Phase::running:
    case Phase::closed:
      break;
  }
}

}  // namespace lockstep::serve
