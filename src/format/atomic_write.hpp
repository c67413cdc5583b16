// Writing files and directories so that a reader never sees half of one: everything is written
// under a temporary name beside its final one, flushed to disk, and renamed into place. A process
// killed at any moment leaves either the old state or the new one, plus at most a temporary
// (a dot-name ending in .tmp-XXXXXX) that readers ignore.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lockstep::format {

// A new file written front to back. Errors (a full disk, a file size limit) throw Error(io)
// naming the path and the reason.
class FileWriter {
 public:
  // Creates `path`, which must not exist.
  explicit FileWriter(std::string path);
  ~FileWriter();  // closes; a writer not finished leaves its file for its owner to remove
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t size);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsync and close.
  void finish();
  const std::string& path() const { return path_; }
  uint64_t written() const { return written_; }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// A file that appears at `path` whole, or not at all (replacing what was there).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size) { writer_->write(data, size); }
  void write(std::string_view text) { writer_->write(text); }
  void commit();

 private:
  std::string path_;
  std::string temp_;
  FileWriter* writer_ = nullptr;
  bool committed_ = false;
};

void write_file_atomic(const std::string& path, std::string_view bytes);

// A directory that appears at `path` whole, or not at all. Files go into temp_path(); commit()
// renames it into place and refuses when `path` exists.
class AtomicDirectory {
 public:
  explicit AtomicDirectory(std::string path);
  ~AtomicDirectory();  // removes the temporary tree unless committed
  AtomicDirectory(const AtomicDirectory&) = delete;
  AtomicDirectory& operator=(const AtomicDirectory&) = delete;

  const std::string& temp_path() const { return temp_; }
  std::string file(std::string_view name) const { return temp_ + "/" + std::string(name); }
  void commit();

 private:
  std::string path_;
  std::string temp_;
  bool committed_ = false;
};

// Writes a small file into a directory being built (fsynced, no rename needed).
void write_file_synced(const std::string& path, std::string_view bytes);
// fsync a directory so a rename inside it is durable.
void sync_directory(const std::string& dir);
// Removes a directory tree; errors ignored (cleanup paths only).
void remove_tree(const std::string& path) noexcept;
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string parent_directory(const std::string& path);
std::string base_name(const std::string& path);
// True for names this module uses for temporaries, which every directory listing skips.
bool is_temporary_name(std::string_view name);

}  // namespace lockstep::format
