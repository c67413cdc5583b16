#include "serve/frame_io.hpp"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "serve/protocol.hpp"

namespace lockstep::serve {
namespace {

#ifdef MSG_NOSIGNAL
constexpr int kSendFlags = MSG_NOSIGNAL;
#else
constexpr int kSendFlags = 0;  // the socket carries SO_NOSIGPIPE instead (see server.cpp)
#endif

// recv that retries on EINTR: > 0 bytes read, 0 at end of stream, -1 on error.
ssize_t receive(int fd, uint8_t* p, size_t n) {
  for (;;) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r >= 0 || errno != EINTR) return r;
  }
}

}  // namespace

FrameReader::FrameReader(int fd, size_t buffer_bytes) : fd_(fd), buffer_(buffer_bytes) {}

ReadStatus FrameReader::read(std::span<uint8_t> out) {
  uint8_t* dst = out.data();
  size_t left = out.size();
  const size_t take = std::min(left, end_ - begin_);
  std::memcpy(dst, buffer_.data() + begin_, take);
  begin_ += take;
  dst += take;
  left -= take;
  bool any = take > 0;
  while (left > 0) {
    // A large remainder goes straight to its destination; a small one refills the buffer, which
    // may bring the next frame's prefix with it.
    const bool direct = left >= buffer_.size();
    const ssize_t r = direct ? receive(fd_, dst, left) : receive(fd_, buffer_.data(), buffer_.size());
    if (r < 0) return ReadStatus::failed;
    if (r == 0) return any ? ReadStatus::truncated : ReadStatus::closed;
    any = true;
    size_t got = static_cast<size_t>(r);
    if (!direct) {
      begin_ = 0;
      end_ = got;
      got = std::min(left, end_);
      std::memcpy(dst, buffer_.data(), got);
      begin_ = got;
    }
    dst += got;
    left -= got;
  }
  return ReadStatus::ok;
}

bool send_frame(int fd, std::span<const std::span<const uint8_t>> parts) {
  uint64_t total = 0;
  for (const auto& p : parts) total += p.size();
  uint8_t header[frame_header_bytes];
  encode_length(total, header);
  std::vector<iovec> iov;
  iov.reserve(parts.size() + 1);
  iov.push_back({header, sizeof(header)});
  for (const auto& p : parts)
    if (!p.empty()) iov.push_back({const_cast<uint8_t*>(p.data()), p.size()});
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
    const ssize_t w = ::sendmsg(fd, &msg, kSendFlags);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    // Skip what was sent: whole iovecs, then the front of a partly sent one.
    size_t sent = static_cast<size_t>(w);
    while (first < iov.size() && sent >= iov[first].iov_len) sent -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + sent;
      iov[first].iov_len -= sent;
    }
  }
  return true;
}

}  // namespace lockstep::serve
