#include "serve/socket.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lockstep/error.hpp"

namespace lockstep::serve {
namespace {

[[noreturn]] void refuse(const std::string& path, const std::string& why,
                         ErrorKind kind = ErrorKind::invalid_argument) {
  throw Error(kind, "socket '" + path + "': " + why);
}

std::string errno_text(int err) { return std::strerror(err); }

sockaddr_un address_of(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty()) refuse(path, "the path is empty");
  if (path.size() >= sizeof(addr.sun_path))
    refuse(path, "the path is " + std::to_string(path.size()) + " bytes; a Unix socket path holds at most " +
                     std::to_string(sizeof(addr.sun_path) - 1) + " (use a shorter or relative one)");
  if (path.find('\0') != std::string::npos) refuse(path, "the path holds a NUL byte");
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

int new_socket() {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) throw Error(ErrorKind::io, std::string("cannot create a Unix socket: ") + errno_text(errno));
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  return fd;
}

// What is at `path` now: nothing, a live server's socket, a leftover socket, or something else.
enum class Occupant { none, live_socket, stale_socket };

Occupant probe(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Occupant::none;
    refuse(path, "cannot inspect the path: " + errno_text(errno), ErrorKind::io);
  }
  if (!S_ISSOCK(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode) ? "a directory" : S_ISLNK(st.st_mode) ? "a symbolic link"
                       : S_ISREG(st.st_mode) ? "a regular file" : "not a socket";
    refuse(path, std::string("the path exists and is ") + what + "; only a socket left by a stopped "
                 "server is replaced");
  }
  const int fd = new_socket();
  int rc;
  do {
    rc = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  } while (rc != 0 && errno == EINTR);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (rc == 0 || err == EAGAIN)  // EAGAIN: listening, with a full backlog
    refuse(path, "another process is serving on it (a connection to it succeeded); stop that "
                 "server or choose another --socket");
  if (err == ECONNREFUSED) return Occupant::stale_socket;
  refuse(path, "a socket is there and probing it failed: " + errno_text(err), ErrorKind::io);
}

}  // namespace

ListeningSocket::ListeningSocket(std::string path, unsigned mode) : path_(std::move(path)) {
  if (mode > 0777) refuse(path_, "mode " + std::to_string(mode) + " is outside 0..0777");
  const sockaddr_un addr = address_of(path_);
  if (probe(path_, addr) == Occupant::stale_socket && ::unlink(path_.c_str()) != 0 && errno != ENOENT)
    refuse(path_, "cannot remove the socket a stopped server left: " + errno_text(errno), ErrorKind::io);
  fd_ = new_socket();
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EADDRINUSE) refuse(path_, "another process created it while this one started");
    refuse(path_, "cannot bind: " + errno_text(err), ErrorKind::io);
  }
  struct stat st {};
  if (::chmod(path_.c_str(), static_cast<mode_t>(mode)) != 0 || ::lstat(path_.c_str(), &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    ::unlink(path_.c_str());
    refuse(path_, "cannot set its mode: " + errno_text(err), ErrorKind::io);
  }
  device_ = st.st_dev;
  inode_ = st.st_ino;
  // Non-blocking: a connection that vanishes between poll and accept must not block accept.
  if (::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK) != 0 || ::listen(fd_, SOMAXCONN) != 0) {
    const int err = errno;
    close_and_remove();
    refuse(path_, "cannot listen: " + errno_text(err), ErrorKind::io);
  }
}

ListeningSocket::~ListeningSocket() { close_and_remove(); }

int ListeningSocket::release_fd() noexcept {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void ListeningSocket::close_and_remove() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (removed_) return;
  removed_ = true;
  struct stat st {};
  if (::lstat(path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_dev == device_ &&
      st.st_ino == inode_)
    ::unlink(path_.c_str());
}

}  // namespace lockstep::serve
