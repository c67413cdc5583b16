// --access-log FILE: one line per HTTP request answered (docs/HTTP.md, "Access log"), appended:
//
//   2025-01-31T12:00:00.123Z 127.0.0.1:51234 POST /v1/completions 200 1234 0.052311 r1
//
// the time the request's head arrived (UTC, milliseconds), the client's address and port, the
// method, the path (no query string: it may carry secrets; bytes outside printable ASCII as %XX),
// the status, the response's bytes written (head and body), the seconds from the head's arrival
// to the response's last byte, the replica. Never a body or a prompt. Each line is one write(2)
// on a file opened O_APPEND: flushed as it is written, whole even when other processes append to
// the same file, and cheap enough for the event loop (a few microseconds; no thread, no buffer).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::serve {

class AccessLog {
 public:
  // Opens `path` for appending, creating it with mode 0600; throws Error naming --access-log and
  // the path.
  explicit AccessLog(const std::string& path);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;

  struct Entry {
    std::chrono::system_clock::time_point time;  // the head's arrival
    std::string_view client;                     // "127.0.0.1:51234", "[::1]:51234"
    std::string_view method;                     // "-" when the request could not be parsed
    std::string_view path;
    int status = 0;
    uint64_t bytes = 0;
    std::chrono::steady_clock::duration duration{};
    std::string_view replica;
  };
  // Appends the entry's line. Never throws: a failed write (a full disk) loses that line alone.
  void write(const Entry& entry) noexcept;

  // The line write() appends, with its newline.
  static std::string line(const Entry& entry);

 private:
  int fd_ = -1;
};

// "ADDRESS:PORT" of a connected socket's peer ("[v6]:PORT"), "-" when it has none (a Unix socket).
std::string peer_text(int fd);

}  // namespace lockstep::serve
