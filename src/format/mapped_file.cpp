#include "format/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "format/format_error.hpp"
#include "lockstep/error.hpp"
#include "lockstep/os_error.hpp"

namespace lockstep::format {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a file";
}

}  // namespace

int open_regular_file(const std::string& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw io_error("cannot open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw io_error("cannot stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(ErrorKind::io, path + ": not a regular file (it is " + file_kind(st.st_mode) + ")");
  }
  // Back to blocking reads (O_NONBLOCK means nothing for a regular file on Linux, but a reader
  // must not meet EAGAIN on a file system where it would).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    throw io_error("cannot open", path, err);
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  size_ = static_cast<size_t>(size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw io_error("cannot map", path, err);
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void MappedFile::drop(std::span<const uint8_t> range) const noexcept {
  if (!data_ || range.empty() || range.data() < data_ || range.data() + range.size() > data_ + size_) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(range.data()) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(range.data()) + range.size()) / page * page;
  // A read-only private mapping never written: dropping its pages loses nothing, and a failure
  // only leaves them resident.
  if (lo < hi) (void)::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

std::string read_text_file(const std::string& path, size_t max_bytes) {
  uint64_t size = 0;
  const int fd = open_regular_file(path, &size);
  if (size > max_bytes) {
    ::close(fd);
    throw Error(ErrorKind::format, path + ": " + std::to_string(size) +
                                       " bytes, more than the " + std::to_string(max_bytes) +
                                       " this file may hold");
  }
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw io_error("cannot read", path, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      throw Error(ErrorKind::format, path + ": more than " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace lockstep::format
