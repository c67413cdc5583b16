#include "train/data.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/rng.hpp"
#include "core/sha256.hpp"
#include "lockstep/error.hpp"

namespace lockstep::train {
namespace {

// Appends the whole file to `out`; returns its size.
int64_t append_file(const std::string& path, std::vector<uint8_t>& out) {
  // O_NONBLOCK so that a FIFO without a writer is refused below instead of hanging the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    std::string where;
    if (!path.empty() && path[0] != '/') {
      // A relative path is read from the current directory: say which file that was.
      std::vector<char> cwd(4096);
      const std::string base = ::getcwd(cwd.data(), cwd.size()) ? std::string(cwd.data()) : std::string("?");
      where = " (tried " + base + (base.size() > 1 ? "/" : "") + path +
              ": relative :data paths are read from the current directory)";
    }
    throw Error(ErrorKind::io, "data file '" + path + "': " + std::strerror(err) + where);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || ::fcntl(fd, F_SETFL, O_RDONLY) != 0) {
    ::close(fd);
    throw Error(ErrorKind::io, "data file '" + path + "' is not a regular file");
  }
  const size_t begin = out.size();
  out.resize(begin + static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < static_cast<size_t>(st.st_size)) {
    const ssize_t n = ::read(fd, out.data() + begin + done, static_cast<size_t>(st.st_size) - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      throw Error(ErrorKind::io,
                  "data file '" + path + "': cannot read: " +
                      (n == 0 ? std::string("it shrank while being read") : std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return static_cast<int64_t>(done);
}

std::string percent(int64_t ppm) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g%%", static_cast<double>(ppm) / 1e4);
  return buf;
}

}  // namespace

TrainingData::TrainingData(const std::vector<std::string>& files, int64_t held_out_ppm,
                           const ModelConfig& config)
    : config_(config) {
  if (files.empty()) throw Error(ErrorKind::invalid_argument, "the run names no data files");
  if (held_out_ppm < 0 || held_out_ppm >= 1000000)
    throw Error(ErrorKind::invalid_argument, "the held-out fraction must be in [0, 1)");
  for (const std::string& path : files) {
    const size_t begin = bytes_.size();
    const int64_t n = append_file(path, bytes_);
    if (n == 0) throw Error(ErrorKind::invalid_argument, "data file '" + path + "' is empty");
    if (config.vocab_size < 256) {
      for (size_t i = begin; i < bytes_.size(); ++i)
        if (bytes_[i] >= config.vocab_size)
          throw Error(ErrorKind::invalid_argument,
                      "data file '" + path + "' holds the byte " + std::to_string(bytes_[i]) + " at offset " +
                          std::to_string(i - begin) + ", outside the model's vocabulary [0, " +
                          std::to_string(config.vocab_size) + ")");
    }
    files_.push_back({path, n, sha256_hex(bytes_.data() + begin, static_cast<size_t>(n))});
  }
  const int64_t total = total_bytes();
  const int64_t held = static_cast<int64_t>(static_cast<unsigned __int128>(total) *
                                            static_cast<uint64_t>(held_out_ppm) / 1000000u);
  train_bytes_ = total - held;
  const int64_t window = int64_t{config.length} + 1;
  const std::string files_text =
      files.size() == 1 ? "'" + files[0] + "'" : std::to_string(files.size()) + " data files";
  if (train_bytes_ < window)
    throw Error(ErrorKind::invalid_argument,
                "the training part of the data (" + files_text + ", " + std::to_string(total) + " bytes, " +
                    percent(held_out_ppm) + " held out) is " + std::to_string(train_bytes_) +
                    " bytes, shorter than one window of :length + 1 = " + std::to_string(window) +
                    " bytes; give more data or a smaller :length");
  if (held > 0 && held < window)
    throw Error(ErrorKind::invalid_argument,
                "the held-out part of the data (the last " + percent(held_out_ppm) + " of " + files_text +
                    ", " + std::to_string(total) + " bytes) is " + std::to_string(held) +
                    " bytes, shorter than one window of :length + 1 = " + std::to_string(window) +
                    " bytes; give more data, a larger :held-out or :held-out 0 (no evaluation)");
}

int64_t TrainingData::window_start(uint64_t seed, int64_t step, int32_t row) const {
  const uint64_t starts = static_cast<uint64_t>(train_bytes_ - config_.length);
  return static_cast<int64_t>(
      random_below(starts, seed, kWindowStream + static_cast<uint64_t>(row), static_cast<uint64_t>(step)));
}

std::vector<int32_t> TrainingData::training_batch(uint64_t seed, int64_t step) const {
  const int64_t cols = int64_t{config_.length} + 1;
  std::vector<int32_t> ids(static_cast<size_t>(config_.batch * cols));
  for (int32_t r = 0; r < config_.batch; ++r) {
    const uint8_t* src = bytes_.data() + window_start(seed, step, r);
    for (int64_t t = 0; t < cols; ++t) ids[static_cast<size_t>(r * cols + t)] = src[t];
  }
  return ids;
}

std::vector<int32_t> TrainingData::held_out_windows(int64_t count) const {
  const int64_t cols = int64_t{config_.length} + 1;
  if (held_out_bytes() < cols || count < 1)
    throw Error(ErrorKind::invalid_argument, "there is no held-out part to evaluate on");
  const uint64_t span = static_cast<uint64_t>(held_out_bytes() - cols);
  std::vector<int32_t> ids(static_cast<size_t>(count * cols));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t offset = count == 1 ? 0
                                       : static_cast<uint64_t>(static_cast<unsigned __int128>(i) * span /
                                                               static_cast<uint64_t>(count - 1));
    const uint8_t* src = bytes_.data() + train_bytes_ + offset;
    for (int64_t t = 0; t < cols; ++t) ids[static_cast<size_t>(i * cols + t)] = src[t];
  }
  return ids;
}

}  // namespace lockstep::train
