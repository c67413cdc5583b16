#include "serve/connection.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <exception>
#include <vector>

#include "serve/frame_io.hpp"
#include "serve/protocol.hpp"

namespace lockstep::serve {
namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

const uint8_t kOk = static_cast<uint8_t>(AnswerStatus::ok);
const uint8_t kError = static_cast<uint8_t>(AnswerStatus::error);

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Connection::Connection(int fd, const ConnectionContext& context) : context_(context), fd_(fd) {
  try {
    thread_ = std::thread([this] { serve(); });
  } catch (...) {
    close_socket();
    throw;
  }
}

Connection::~Connection() {
  if (thread_.joinable()) thread_.join();
  close_socket();
}

void Connection::shutdown(int how) noexcept {
  std::lock_guard lock(fd_mutex_);
  if (fd_ >= 0) ::shutdown(fd_, how);
}

void Connection::stop_reading() noexcept { shutdown(SHUT_RD); }
void Connection::abort() noexcept { shutdown(SHUT_RDWR); }

void Connection::close_socket() noexcept {
  std::lock_guard lock(fd_mutex_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool Connection::send(std::span<const std::span<const uint8_t>> parts) {
  writing_since_.store(now_ns(), std::memory_order_release);
  const bool sent = send_frame(fd_, parts);
  writing_since_.store(0, std::memory_order_release);
  return sent;
}

void Connection::serve() noexcept {
  try {
    serve_calls();
  } catch (...) {
    // Out of memory for this connection's buffers: it alone is dropped.
  }
  close_socket();
  {
    std::lock_guard lock(context_.finished_mutex);
    finished_.store(true, std::memory_order_release);
  }
  context_.finished.notify_all();
}

void Connection::serve_calls() {
  const int fd = fd_;  // stays open until this thread closes it
  const std::span<const uint8_t> handshake[] = {bytes_of(context_.handshake)};
  if (!send(handshake)) return;
  const CallLayout& layout = context_.layout;
  FrameReader reader(fd);
  std::vector<uint8_t> input(layout.input_bytes());
  std::vector<uint8_t> output(layout.output_bytes());
  while (!context_.stopping.load(std::memory_order_acquire)) {
    uint8_t header[frame_header_bytes];
    if (reader.read(header) != ReadStatus::ok) return;  // gone, or gone mid-prefix
    const uint64_t length = decode_length(header);
    if (length != layout.input_bytes()) {
      // The body is never read: its length alone is wrong, and it may be absurd.
      const std::string message = wrong_length_message(layout, length);
      const std::span<const uint8_t> parts[] = {{&kError, 1}, bytes_of(message)};
      context_.calls.fetch_add(1, std::memory_order_relaxed);
      send(parts);
      return;
    }
    if (reader.read(input) != ReadStatus::ok) return;  // a client that vanished mid-frame
    CallResult result = context_.batcher.run(input, output);
    if (!result.ok && result.error.empty()) result.error = "the server failed to run this call";
    context_.calls.fetch_add(1, std::memory_order_relaxed);
    const std::span<const uint8_t> answer[] = {{result.ok ? &kOk : &kError, 1},
                                               result.ok ? std::span<const uint8_t>(output)
                                                         : bytes_of(result.error)};
    if (!send(answer)) return;  // a client that vanished mid-answer
  }
}

}  // namespace lockstep::serve
