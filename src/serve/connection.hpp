// One client connection, served on its own thread: the handshake, then call after call until the
// client leaves, sends a frame of the wrong length, or the server stops.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <thread>

#include "lockstep/call.hpp"
#include "serve/batcher.hpp"

namespace lockstep::serve {

// What every connection shares; owned by the server, outliving its connections.
struct ConnectionContext {
  const CallLayout& layout;
  const std::string& handshake;
  Batcher& batcher;
  const std::atomic<bool>& stopping;  // read no further call once set
  std::atomic<uint64_t>& calls;       // call frames answered
  // Notified (under finished_mutex) when a connection's thread is about to end.
  std::mutex& finished_mutex;
  std::condition_variable& finished;
};

class Connection {
 public:
  // Takes ownership of the accepted socket `fd` and starts serving it on a new thread.
  // Throws std::system_error when no thread can be started (the socket is then closed).
  Connection(int fd, const ConnectionContext& context);
  ~Connection();  // joins the thread
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // Since when (steady clock, ns) the thread has been writing a frame; 0 when it is not.
  int64_t writing_since() const { return writing_since_.load(std::memory_order_acquire); }
  // Wakes a read in progress with end-of-stream: no further call is read, an answer being
  // computed is still written.
  void stop_reading() noexcept;
  // Also fails a write in progress: for a client that stopped reading its answer.
  void abort() noexcept;

 private:
  void serve() noexcept;
  void serve_calls();
  void shutdown(int how) noexcept;
  void close_socket() noexcept;
  bool send(std::span<const std::span<const uint8_t>> parts);

  const ConnectionContext& context_;
  std::mutex fd_mutex_;  // fd_ is closed by the thread and shut down by the server
  int fd_;
  std::atomic<bool> finished_{false};
  std::atomic<int64_t> writing_since_{0};
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace lockstep::serve
