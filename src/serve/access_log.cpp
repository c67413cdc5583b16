// The access log (access_log.hpp).
#include "serve/access_log.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "lockstep/error.hpp"

namespace lockstep::serve {

AccessLog::AccessLog(const std::string& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd_ < 0) throw Error(ErrorKind::io, "--access-log '" + path + "': cannot open it for appending: " + std::strerror(errno));
}

AccessLog::~AccessLog() {
  if (fd_ >= 0) ::close(fd_);
}

std::string AccessLog::line(const Entry& e) {
  using namespace std::chrono;
  const auto since_epoch = duration_cast<milliseconds>(e.time.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(since_epoch / 1000);
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char time[48];
  std::snprintf(time, sizeof time, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, static_cast<int>(since_epoch % 1000));
  std::string out;
  out.reserve(128 + e.path.size());
  const auto field = [&out](std::string_view text) {
    out.append(text.empty() ? std::string_view("-") : text);
    out.push_back(' ');
  };
  field(time);
  field(e.client);
  field(e.method);
  // The path as one field: no space, no control byte, at most 1 KiB of it.
  constexpr size_t kMaxPath = 1024;
  if (e.path.empty()) out.push_back('-');
  for (const unsigned char c : e.path.substr(0, kMaxPath)) {
    static constexpr char hex[] = "0123456789ABCDEF";
    if (c > ' ' && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  char tail[96];
  std::snprintf(tail, sizeof tail, " %d %llu %.6f ", e.status, static_cast<unsigned long long>(e.bytes),
                duration<double>(e.duration).count());
  out.append(tail);
  out.append(e.replica);
  out += '\n';
  return out;
}

void AccessLog::write(const Entry& entry) noexcept {
  try {
    const std::string text = line(entry);
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  } catch (...) {
    // No memory for the line: it alone is lost.
  }
}

std::string peer_text(int fd) {
  sockaddr_storage address{};
  socklen_t size = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0) return "-";
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& a = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
    return std::string(text).append(":").append(std::to_string(ntohs(a.sin_port)));
  }
  if (address.ss_family == AF_INET6) {
    const auto& a = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
    return std::string("[").append(text).append("]:").append(std::to_string(ntohs(a.sin6_port)));
  }
  return "-";
}

}  // namespace lockstep::serve
