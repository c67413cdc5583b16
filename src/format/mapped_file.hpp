// A read-only memory map of a whole file, and the one way lockstep opens a file it reads.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace lockstep::format {

// Opens `path` for reading and returns the descriptor (O_CLOEXEC, blocking), with its size in
// `*size`, when it is a regular file. Anything else is refused with Error(io) naming the path
// and what it is ("a FIFO", "a directory", ...), before a byte is read: the open itself is
// non-blocking, so a FIFO with no writer cannot hang the reader.
int open_regular_file(const std::string& path, uint64_t* size);

class MappedFile {
 public:
  // Throws Error(io) naming the path when it cannot be opened or mapped, or is not a regular
  // file (open_regular_file).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Gives back the whole pages of `range` (a part of bytes()) that this process holds: a reader
  // done with a part calls it so that the file's pages and what it was read into are not both
  // resident. The bytes stay readable (the pages come back from the file when touched).
  void drop(std::span<const uint8_t> range) const noexcept;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole file as a string (small files: model.json, run files). Refuses files over max_bytes,
// and anything but a regular file (open_regular_file).
std::string read_text_file(const std::string& path, size_t max_bytes);

}  // namespace lockstep::format
