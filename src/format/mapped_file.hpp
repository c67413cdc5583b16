// A read-only memory map of a whole file.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace lockstep::format {

class MappedFile {
 public:
  // Throws Error(io) naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&&) = delete;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// The whole file as a string (small files: model.json, run files). Refuses files over max_bytes.
std::string read_text_file(const std::string& path, size_t max_bytes);

}  // namespace lockstep::format
