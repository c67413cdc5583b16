// One client connection on the event loop: the handshake, then call after call until the client
// leaves, sends a frame of the wrong length, idles past a timeout, or the server stops.
//
// A connection costs no thread: it is a state machine driven by Asio completions on its own
// strand (so any number of I/O threads may run the loop). While it waits for the client it holds
// one pending read; while the model runs its call it holds nothing but the batcher's completion.
// Its memory is its read buffer, its call's input and (from its first call) its answer's output.
//
//   writing handshake -> reading -> running (batcher) -> writing answer -> reading -> ...
//   any of them -> draining (a graceful close) or closed
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>

#include "lockstep/call.hpp"
#include "serve/batcher.hpp"
#include "serve/frame_io.hpp"

namespace lockstep::serve {

namespace asio = boost::asio;

// Any connected stream socket: a Unix one today, a TCP one through the same code later. Its
// executor is the connection's strand.
using StreamSocket = asio::generic::stream_protocol::socket;

// What every connection shares; owned by the server, outliving its connections.
struct ConnectionContext {
  const CallLayout& layout;
  std::span<const uint8_t> handshake_frame;  // the handshake, with its length prefix
  Batcher& batcher;
  std::atomic<uint64_t>& calls;              // call frames answered, errors included
  std::chrono::milliseconds idle_timeout;    // part of a frame and then silence; 0: no limit
  std::chrono::milliseconds idle_close;      // no call in flight, no partial frame; 0: no limit
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  // Called once, on the connection's strand, when its socket is closed.
  using Closed = std::function<void(Connection*)>;

  Connection(StreamSocket socket, const ConnectionContext& context, Closed on_closed);
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Sends the handshake and serves calls. Any thread.
  void start();
  // Reads no further call: a call already read is answered, then the connection closes
  // gracefully; a write that stays blocked longer than the grace (a client that stopped
  // reading) is abandoned. Any thread, any number of times.
  void stop();

  // For the connection limit (connection_slots.hpp). Any thread. Idle: waiting between calls
  // with no byte of the next one received; last_active: when it last became so (steady clock
  // ticks). evict() closes it gracefully, as --idle-close would, if it is still idle then.
  bool idle() const { return idle_.load(std::memory_order_relaxed); }
  int64_t last_active() const { return last_active_.load(std::memory_order_relaxed); }
  void evict();

 private:
  enum class Phase { writing, reading, running, draining, closed };
  enum class Cancel { none, stop, idle };  // why the pending read was cancelled

  void on_stop();
  void read_calls();
  void on_read(const boost::system::error_code& ec, size_t n);
  void submit_call();
  void on_result(CallResult result);
  void write(std::span<const uint8_t> prefix, std::span<const uint8_t> body, bool then_close);
  void close_gracefully();
  void drain();
  void finish_close() noexcept;
  void close_now() noexcept;
  void arm(std::chrono::steady_clock::duration after);
  void disarm() noexcept;
  void on_deadline();

  StreamSocket socket_;
  asio::steady_timer deadline_;  // the idle timeouts, the write grace, the drain's bounds
  uint64_t deadline_generation_ = 0;  // a deadline that fires after disarm() is stale
  const ConnectionContext& context_;
  Closed on_closed_;
  CallFrameParser parser_;
  std::vector<uint8_t> buffer_;  // what the socket gave, buffer_[begin_, end_) not yet parsed
  size_t begin_ = 0, end_ = 0;
  std::vector<uint8_t> output_;  // the call's outputs; allocated at the first call
  CallResult result_;            // the answer being written (its error text)
  std::array<uint8_t, frame_header_bytes + 1> answer_prefix_{};
  // Outstanding work on the loop while the batcher holds this connection's call, so that the
  // loop does not run dry (and serve() return) before the answer is written.
  asio::any_io_executor work_;
  Phase phase_ = Phase::writing;
  Cancel cancelled_ = Cancel::none;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point drain_until_;
  std::atomic<bool> idle_{false};
  std::atomic<int64_t> last_active_{0};
};

// For a connection the server will not serve: sends `frame` (the refusal handshake) if the socket
// takes it at once, then closes without resetting the peer. No state is kept.
void refuse(StreamSocket& socket, std::span<const uint8_t> frame) noexcept;

}  // namespace lockstep::serve
