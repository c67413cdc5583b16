// Reading and writing frames on a connected stream socket. Nothing here allocates from what the
// peer sends: the reader's buffer has a fixed size and the caller decides, from the length
// prefix, whether to read a frame's body at all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lockstep::serve {

enum class ReadStatus {
  ok,         // every byte asked for was read
  closed,     // the peer closed (or the socket was shut down) before the first byte
  truncated,  // the peer closed after some bytes but before the last
  failed,     // the socket reported an error
};

// Buffered reads: one recv usually brings a call's length prefix and its body together.
class FrameReader {
 public:
  explicit FrameReader(int fd, size_t buffer_bytes = 64 * 1024);
  // Reads exactly `out.size()` bytes; bytes beyond them stay buffered for the next read.
  ReadStatus read(std::span<uint8_t> out);

 private:
  int fd_;
  std::vector<uint8_t> buffer_;
  size_t begin_ = 0, end_ = 0;  // buffered bytes are buffer_[begin_, end_)
};

// Sends one frame: the u64 length of the parts together, then the parts. Never raises SIGPIPE.
// Returns false when the peer is gone or the socket failed.
bool send_frame(int fd, std::span<const std::span<const uint8_t>> parts);

}  // namespace lockstep::serve
