#include "train/evaluate.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "format/mapped_file.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep {
namespace train {
namespace {

// Rows per forward call: about 512K logits (2K positions of a byte model) at a time, so that a
// call's scratch (every activation of its positions) stays small enough to be reused warm.
int64_t group_rows(const ModelConfig& c, int64_t cols) {
  const int64_t per_row = std::max<int64_t>(1, (cols - 1) * c.vocab_size);
  return std::max<int64_t>(1, (int64_t{1} << 19) / per_row);
}

// Adds the losses of ids [rows, cols] to `total` in order; returns how many were added. With
// `progress`, reports `done` (advanced by each call's count) against `all` after each call.
int64_t add_losses(const Model& model, const int32_t* ids, int64_t rows, int64_t cols,
                   const CallOptions& call, float& total, const EvaluationProgress& progress = {},
                   int64_t* done = nullptr, int64_t all = 0) {
  const int64_t group = group_rows(model.config(), cols);
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r += group) {
    const int64_t n = std::min(group, rows - r);
    const std::vector<float> losses = model.token_losses({ids + r * cols, n, cols}, call);
    for (const float l : losses) total = total + l;
    count += static_cast<int64_t>(losses.size());
    if (progress && done) {
      *done += static_cast<int64_t>(losses.size());
      progress(*done, all);
    }
  }
  return count;
}

}  // namespace

float mean_window_loss(const Model& model, const std::vector<int32_t>& ids, int64_t rows, int64_t cols,
                       const CallOptions& call) {
  float total = 0.0f;
  const int64_t count = add_losses(model, ids.data(), rows, cols, call, total);
  return total / static_cast<float>(count);
}

}  // namespace train

ByteEvaluation evaluate_bytes(const Model& model, std::span<const uint8_t> bytes, const CallOptions& call,
                              const EvaluationProgress& progress) {
  const ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(bytes.size());
  if (n < 2)
    throw Error(ErrorKind::invalid_argument, "evaluation needs at least 2 bytes, got " + std::to_string(n));
  for (int64_t i = 0; i < n; ++i)
    if (bytes[static_cast<size_t>(i)] >= c.vocab_size)
      throw Error(ErrorKind::invalid_argument, "byte " + std::to_string(bytes[static_cast<size_t>(i)]) +
                                                   " at offset " + std::to_string(i) +
                                                   " is outside the model's vocabulary [0, " +
                                                   std::to_string(c.vocab_size) + ")");
  // Windows of length + 1 bytes starting every `length` bytes; the full ones first, then the
  // shorter last one, so every byte after the first is predicted exactly once.
  const int64_t L = c.length;
  const int64_t full = (n - 1) / L;
  const int64_t rest = (n - 1) - full * L;  // predictions in the last, shorter window
  std::vector<int32_t> ids(static_cast<size_t>(full * (L + 1)));
  for (int64_t w = 0; w < full; ++w)
    for (int64_t t = 0; t <= L; ++t)
      ids[static_cast<size_t>(w * (L + 1) + t)] = bytes[static_cast<size_t>(w * L + t)];
  float total = 0.0f;
  int64_t done = 0;
  int64_t count = train::add_losses(model, ids.data(), full, L + 1, call, total, progress, &done, n - 1);
  if (rest > 0) {
    std::vector<int32_t> tail(bytes.begin() + full * L, bytes.end());
    count += train::add_losses(model, tail.data(), 1, rest + 1, call, total, progress, &done, n - 1);
  }
  ByteEvaluation e;
  e.loss = total / static_cast<float>(count);
  e.loss_bits = std::bit_cast<uint32_t>(e.loss);
  e.bits_per_byte = static_cast<double>(e.loss) / std::log(2.0);
  e.bytes = n;
  e.predictions = count;
  e.windows = full + (rest > 0 ? 1 : 0);
  return e;
}

ByteEvaluation evaluate_file(const Model& model, const std::string& path, const CallOptions& call,
                             const EvaluationProgress& progress) {
  const format::MappedFile file(path);
  if (file.bytes().size() < 2)
    throw Error(ErrorKind::invalid_argument, "'" + path + "' holds " + std::to_string(file.bytes().size()) +
                                                 " bytes; evaluation needs at least 2");
  return evaluate_bytes(model, file.bytes(), call, progress);
}

}  // namespace lockstep
