#include "format/atomic_write.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "format/format_error.hpp"
#include "lockstep/error.hpp"
#include "lockstep/os_error.hpp"

namespace lockstep::format {
namespace {

std::string temp_template(const std::string& path) {
  return parent_directory(path) + "/." + base_name(path) + ".tmp-XXXXXX";
}

}  // namespace

std::string parent_directory(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool is_temporary_name(std::string_view name) {
  return !name.empty() && name[0] == '.' && name.find(".tmp-") != std::string_view::npos;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

FileWriter::FileWriter(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw io_error("cannot create", path_, errno);
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw io_error("cannot write", path_, errno);
    }
    if (n == 0) throw io_error("cannot write", path_, ENOSPC);
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void FileWriter::finish() {
  if (fd_ < 0) return;
  if (::fsync(fd_) != 0) throw io_error("cannot flush", path_, errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw io_error("cannot close", path_, errno);
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  std::string tmpl = temp_template(path_);
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const int fd = ::mkstemp(buf.data());
  if (fd < 0) throw io_error("cannot create a temporary file beside", path_, errno);
  ::close(fd);
  temp_ = buf.data();
  ::unlink(temp_.c_str());
  writer_ = new FileWriter(temp_);
}

AtomicFile::~AtomicFile() {
  delete writer_;
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::commit() {
  writer_->finish();
  if (::rename(temp_.c_str(), path_.c_str()) != 0) throw io_error("cannot rename into", path_, errno);
  committed_ = true;
  sync_directory(parent_directory(path_));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void write_file_synced(const std::string& path, std::string_view bytes) {
  FileWriter w(path);
  w.write(bytes);
  w.finish();
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void remove_tree(const std::string& path) noexcept {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      std::vector<std::string> names;
      while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") names.push_back(name);
      }
      ::closedir(d);
      for (const auto& name : names) remove_tree(path + "/" + name);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

AtomicDirectory::AtomicDirectory(std::string path) : path_(std::move(path)) {
  std::string tmpl = temp_template(path_);
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data()))
    throw io_error("cannot create a temporary directory beside", path_, errno);
  temp_ = buf.data();
  ::chmod(temp_.c_str(), 0755);
}

AtomicDirectory::~AtomicDirectory() {
  if (!committed_) remove_tree(temp_);
}

void AtomicDirectory::commit() {
  sync_directory(temp_);
  if (path_exists(path_)) throw OsError(EEXIST, path_ + ": already exists");
  // rename() would replace an empty directory that appeared at path_ since the check above;
  // RENAME_NOREPLACE makes the refusal atomic where the file system supports it.
  if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0) {
    const int err = errno;
    if (err == EEXIST) throw OsError(EEXIST, path_ + ": already exists");
    if (err != EINVAL && err != ENOSYS) throw io_error("cannot rename into", path_, err);
    if (::rename(temp_.c_str(), path_.c_str()) != 0) throw io_error("cannot rename into", path_, errno);
  }
  committed_ = true;
  sync_directory(parent_directory(path_));
}

}  // namespace lockstep::format
