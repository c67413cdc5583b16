// The inference entry points: input validation (the rules of the spec documents 003/004), then
// the forward pass on the device the call asks for.
#include <bit>
#include <cmath>

#include "core/fpenv.hpp"
#include "kernels/ref/ops.hpp"
#include "model/loss.hpp"
#include "model/model_impl.hpp"

namespace lockstep {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::invalid_argument, message);
}

std::string id_range(const ModelConfig& c) {
  return c.vocab_size == 256 ? "byte values in [0, 256)"
                             : "token ids in [0, " + std::to_string(c.vocab_size) + ")";
}

void check_id(const ModelConfig& c, int32_t id, int64_t row, int64_t pos) {
  if (id < 0 || id >= c.vocab_size)
    invalid("ids must be " + id_range(c) + "; got " + std::to_string(id) + " at row " +
            std::to_string(row) + ", position " + std::to_string(pos));
}

// ids [B, T] with B >= 1 and 1 <= T <= length; lengths (optional) one per row in [1, T].
// Returns each row's real length.
std::vector<int32_t> check_batch(const ModelConfig& c, const IdsView& ids,
                                 std::span<const int32_t> lengths) {
  if (!ids.data && ids.rows * ids.cols != 0) invalid("ids has no data");
  if (ids.rows <= 0 || ids.cols <= 0 || ids.cols > c.length)
    invalid("ids must be [batch, 1.." + std::to_string(c.length) + "]; got [" +
            std::to_string(ids.rows) + ", " + std::to_string(ids.cols) + "]");
  std::vector<int32_t> real(static_cast<size_t>(ids.rows), static_cast<int32_t>(ids.cols));
  if (!lengths.empty()) {
    if (static_cast<int64_t>(lengths.size()) != ids.rows)
      invalid("lengths must hold one length per row: " + std::to_string(ids.rows) + " rows, " +
              std::to_string(lengths.size()) + " lengths");
    for (size_t b = 0; b < lengths.size(); ++b) {
      if (lengths[b] < 1 || lengths[b] > ids.cols)
        invalid("lengths[" + std::to_string(b) + "] = " + std::to_string(lengths[b]) +
                " is outside [1, " + std::to_string(ids.cols) + "]");
      real[b] = lengths[b];
    }
  }
  for (int64_t b = 0; b < ids.rows; ++b)
    for (int64_t t = 0; t < real[static_cast<size_t>(b)]; ++t) check_id(c, ids.at(b, t), b, t);
  return real;
}

}  // namespace

void Model::forward(std::span<const RowRequest> rows, const CallOptions& call) const {
  const Impl& m = *impl_;
  const ModelConfig& c = m.config;
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowRequest& r = rows[i];
    const int64_t n = static_cast<int64_t>(r.ids.size());
    if (n < 1 || n > c.length)
      invalid("row " + std::to_string(i) + " holds " + std::to_string(n) + " ids; expected 1.." +
              std::to_string(c.length));
    if (r.out_begin < 0 || r.out_begin >= r.out_end || r.out_end > n)
      invalid("row " + std::to_string(i) + " asks for outputs at [" + std::to_string(r.out_begin) +
              ", " + std::to_string(r.out_end) + "), outside its " + std::to_string(n) + " positions");
    for (int64_t t = 0; t < r.out_end; ++t) check_id(c, r.ids[static_cast<size_t>(t)], static_cast<int64_t>(i), t);
  }
  const Device device = call.device.value_or(m.device);
  FloatEnvScope env;
  if (device == Device::reference) {
    if (call.threads) m.threads_for(call);  // validated even though the reference ignores it
    forward_reference(m, rows);
  } else if (device == Device::cuda) {
    if (m.blocks) Model::Impl::refuse_cuda_for_blocks(m.profile);
    forward_cuda(m, rows);
  } else {
    std::vector<RowWork> work(rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
      work[i] = {rows[i].ids, 0, rows[i].out_begin, rows[i].out_end, rows[i].logits, rows[i].hidden, nullptr};
    forward_fast(m, work, m.threads_for(call), call.threads.has_value());
  }
}

std::vector<float> Model::logits(const IdsView& ids, std::span<const int32_t> lengths,
                                 const CallOptions& call) const {
  const ModelConfig& c = impl_->config;
  const std::vector<int32_t> real = check_batch(c, ids, lengths);
  std::vector<float> out(static_cast<size_t>(ids.rows * ids.cols * c.vocab_size), 0.0f);
  std::vector<RowRequest> rows(static_cast<size_t>(ids.rows));
  for (int64_t b = 0; b < ids.rows; ++b) {
    RowRequest& r = rows[static_cast<size_t>(b)];
    r.ids = {ids.data + b * ids.cols, static_cast<size_t>(real[static_cast<size_t>(b)])};
    r.out_begin = 0;
    r.out_end = real[static_cast<size_t>(b)];
    r.logits = out.data() + b * ids.cols * c.vocab_size;
  }
  forward(rows, call);
  return out;
}

std::vector<float> Model::hidden(const IdsView& ids, std::span<const int32_t> lengths,
                                 const CallOptions& call) const {
  const ModelConfig& c = impl_->config;
  const std::vector<int32_t> real = check_batch(c, ids, lengths);
  std::vector<float> out(static_cast<size_t>(ids.rows * ids.cols * c.d_model), 0.0f);
  std::vector<RowRequest> rows(static_cast<size_t>(ids.rows));
  for (int64_t b = 0; b < ids.rows; ++b) {
    RowRequest& r = rows[static_cast<size_t>(b)];
    r.ids = {ids.data + b * ids.cols, static_cast<size_t>(real[static_cast<size_t>(b)])};
    r.out_begin = 0;
    r.out_end = real[static_cast<size_t>(b)];
    r.hidden = out.data() + b * ids.cols * c.d_model;
  }
  forward(rows, call);
  return out;
}

std::vector<int32_t> Model::next_bytes(const IdsView& ids, std::span<const int32_t> lengths,
                                       const CallOptions& call) const {
  const ModelConfig& c = impl_->config;
  const std::vector<int32_t> real = check_batch(c, ids, lengths);
  std::vector<float> last(static_cast<size_t>(ids.rows * c.vocab_size));
  std::vector<RowRequest> rows(static_cast<size_t>(ids.rows));
  for (int64_t b = 0; b < ids.rows; ++b) {
    RowRequest& r = rows[static_cast<size_t>(b)];
    const int32_t n = real[static_cast<size_t>(b)];
    r.ids = {ids.data + b * ids.cols, static_cast<size_t>(n)};
    r.out_begin = n - 1;
    r.out_end = n;
    r.logits = last.data() + b * c.vocab_size;
  }
  forward(rows, call);
  std::vector<int32_t> out(static_cast<size_t>(ids.rows));
  for (int64_t b = 0; b < ids.rows; ++b)
    out[static_cast<size_t>(b)] = greedy_choice({last.data() + b * c.vocab_size, static_cast<size_t>(c.vocab_size)});
  return out;
}

namespace {

// Each position's loss for ids [rows, T + 1] in the loss layout (inputs [0, T), targets [1, T],
// -100 allowed in the last column), after checking every id; `targets` receives the targets.
std::vector<float> position_losses(const Model& model, const IdsView& ids, const CallOptions& call,
                                   std::vector<int32_t>& targets) {
  const ModelConfig& c = model.config();
  const int64_t T = ids.cols - 1, V = c.vocab_size;
  for (int64_t b = 0; b < ids.rows; ++b) {
    for (int64_t t = 0; t <= T; ++t) {
      const int32_t id = ids.at(b, t);
      if (t == T && id == ignored_target) continue;
      check_id(c, id, b, t);
    }
  }
  std::vector<float> logits(static_cast<size_t>(ids.rows * T * V));
  std::vector<RowRequest> rows(static_cast<size_t>(ids.rows));
  targets.assign(static_cast<size_t>(ids.rows * T), 0);
  for (int64_t b = 0; b < ids.rows; ++b) {
    RowRequest& r = rows[static_cast<size_t>(b)];
    r.ids = {ids.data + b * ids.cols, static_cast<size_t>(T)};
    r.out_begin = 0;
    r.out_end = static_cast<int32_t>(T);
    r.logits = logits.data() + b * T * V;
    for (int64_t t = 0; t < T; ++t) targets[static_cast<size_t>(b * T + t)] = ids.at(b, t + 1);
  }
  model.forward(rows, call);
  FloatEnvScope env;
  return cross_entropy_rows(model.impl(), logits, targets, call);
}

}  // namespace

uint32_t Model::loss_bits(const IdsView& ids, const CallOptions& call) const {
  const ModelConfig& c = impl_->config;
  if (!ids.data || ids.rows != c.batch || ids.cols != c.length + 1)
    invalid("ids must be [" + std::to_string(c.batch) + ", " + std::to_string(c.length + 1) +
            "]; got [" + std::to_string(ids.rows) + ", " + std::to_string(ids.cols) + "]");
  std::vector<int32_t> targets;
  const std::vector<float> losses = position_losses(*this, ids, call, targets);
  FloatEnvScope env;
  return std::bit_cast<uint32_t>(mean_loss(losses, targets));
}

std::vector<float> Model::token_losses(const IdsView& ids, const CallOptions& call) const {
  const ModelConfig& c = impl_->config;
  if (!ids.data || ids.rows < 1 || ids.cols < 2 || ids.cols > c.length + 1)
    invalid("ids must be [rows, 2.." + std::to_string(c.length + 1) + "]; got [" +
            std::to_string(ids.rows) + ", " + std::to_string(ids.cols) + "]");
  std::vector<int32_t> targets;
  return position_losses(*this, ids, call, targets);
}

float Model::loss(const IdsView& ids, const CallOptions& call) const {
  return std::bit_cast<float>(loss_bits(ids, call));
}

int32_t greedy_choice(std::span<const float> logits) {
  int32_t best = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const float v = logits[i];
    if (v != v) continue;
    if (best < 0 || v > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  }
  if (best < 0) throw Error(ErrorKind::invalid_argument, "every logit is NaN; no token can be chosen");
  return best;
}

}  // namespace lockstep
