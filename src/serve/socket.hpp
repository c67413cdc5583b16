// The listening Unix socket and the rules for the path it takes.
#pragma once

#include <sys/types.h>

#include <string>

namespace lockstep::serve {

class ListeningSocket {
 public:
  // Binds and listens at `path` with permission bits `mode`, following the rules:
  //   nothing there                      -> created
  //   a socket nobody listens on         -> a stopped server's leftover: replaced
  //   a socket a live process listens on -> refused
  //   anything else (file, dir, symlink) -> refused
  // The file gets `mode` exactly (not masked by the umask) before anyone can connect: it is
  // chmod'ed between bind and listen, and connecting before listen is refused.
  // Throws Error naming the path and what is wrong.
  ListeningSocket(std::string path, unsigned mode);
  ~ListeningSocket();  // close_and_remove()
  ListeningSocket(const ListeningSocket&) = delete;
  ListeningSocket& operator=(const ListeningSocket&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Hands the listening descriptor to a new owner (the server's acceptor), which closes it;
  // close_and_remove() then only unlinks the path.
  int release_fd() noexcept;
  // Stops listening (unless released) and unlinks the path if it is still this socket (not one
  // another process put there since). Idempotent.
  void close_and_remove() noexcept;

 private:
  std::string path_;
  int fd_ = -1;
  dev_t device_ = 0;
  ino_t inode_ = 0;
  bool removed_ = false;
};

}  // namespace lockstep::serve
