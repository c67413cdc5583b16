// Training data: byte files concatenated in order, the last part held out for evaluation,
// training windows drawn by the counter-based RNG keyed by (seed, row, step), and a fixed set of
// held-out windows (docs/TRAINING.md, "Data").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep::train {

struct DataFileInfo {
  std::string path;  // as the run file names it
  int64_t bytes = 0;
  std::string sha256;  // of the file's bytes
};

// The Philox stream of training row r is kWindowStream + r; the counter is the step.
inline constexpr uint64_t kWindowStream = uint64_t{0x77696e64} << 32;  // "wind"

class TrainingData {
 public:
  // Reads `files` in order. Refuses (Error, naming the file) a file that is missing, not a
  // regular file, unreadable or empty; a byte outside the vocabulary; and a training or held-out
  // part shorter than one window of length + 1 bytes. held_out_ppm in [0, 1e6).
  TrainingData(const std::vector<std::string>& files, int64_t held_out_ppm, const ModelConfig& config);

  const std::vector<DataFileInfo>& files() const { return files_; }
  int64_t total_bytes() const { return static_cast<int64_t>(bytes_.size()); }
  int64_t train_bytes() const { return train_bytes_; }
  int64_t held_out_bytes() const { return total_bytes() - train_bytes_; }

  // The first byte of training row `row`'s window at step `step` (1-based), in
  // [0, train_bytes - length - 1]: random_below(train_bytes - length, seed, kWindowStream + row,
  // step).
  int64_t window_start(uint64_t seed, int64_t step, int32_t row) const;
  // ids [batch, length + 1] of step `step`.
  std::vector<int32_t> training_batch(uint64_t seed, int64_t step) const;
  // `count` held-out windows [count, length + 1], window i starting at held-out offset
  // floor(i * (held_out_bytes - length - 1) / (count - 1)) (0 when count is 1): evenly spaced
  // from the part's first byte to its last.
  std::vector<int32_t> held_out_windows(int64_t count) const;

 private:
  ModelConfig config_;
  std::vector<DataFileInfo> files_;
  std::vector<uint8_t> bytes_;
  int64_t train_bytes_ = 0;
};

}  // namespace lockstep::train
