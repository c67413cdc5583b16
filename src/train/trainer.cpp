// The one-step trainer: validate, compute the loss and gradient (reference or fast path), clip,
// AdamW, EMA, then commit all of it at once. A step that fails changes nothing but clearing the
// gradient.
#include "core/number_text.hpp"
#include "lockstep/trainer.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <set>

#include "core/fpenv.hpp"
#include "core/sha256.hpp"
#include "core/thread_pool.hpp"
#include "kernels/ref/optimizer.hpp"
#include "train/distributed.hpp"
#include "train/fast_step.hpp"
#include "train/optimizer_pass.hpp"
#include "train/reference_step.hpp"

namespace lockstep {
namespace {

[[noreturn]] void refuse_input(const std::string& message) { throw Error(ErrorKind::invalid_argument, message); }

void check_finite(std::span<const float> v, const char* what) {
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) refuse_input(std::string(what) + " must be finite; element " + std::to_string(i) + " is " + std::to_string(v[i]));
}

void check_ids(const ModelConfig& c, const IdsView& ids) {
  if (!ids.data || ids.rows != c.batch || ids.cols != c.length + 1)
    refuse_input("ids must be [" + std::to_string(c.batch) + ", " + std::to_string(c.length + 1) + "]; got [" +
            std::to_string(ids.rows) + ", " + std::to_string(ids.cols) + "]");
  const std::string range = c.vocab_size == 256 ? "byte values in [0, 256)" : "token ids in [0, " + std::to_string(c.vocab_size) + ")";
  for (int64_t b = 0; b < ids.rows; ++b) {
    for (int64_t t = 0; t <= c.length; ++t) {
      const int32_t id = ids.at(b, t);
      if (t == c.length && id == ignored_target) continue;
      if (id < 0 || id >= c.vocab_size)
        refuse_input("ids must be " + range + "; got " + std::to_string(id) + " at row " + std::to_string(b) +
                ", position " + std::to_string(t));
    }
  }
}

}  // namespace

void AdamWOptions::validate() const {
  auto bad = [](const char* name, float v, const char* want) {
    refuse_input(std::string(name) + " = " + std::to_string(v) + " must be " + want);
  };
  if (!(std::isfinite(lr) && lr > 0)) bad("lr", lr, "a positive finite number");
  if (!(beta1 >= 0 && beta1 < 1)) bad("beta1", beta1, "in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) bad("beta2", beta2, "in [0, 1)");
  if (!(std::isfinite(eps) && eps > 0)) bad("eps", eps, "a positive finite number");
  if (!(std::isfinite(weight_decay) && weight_decay >= 0)) bad("weight_decay", weight_decay, "a finite number >= 0");
  if (!(std::isfinite(clip_norm) && clip_norm >= 0)) bad("clip_norm", clip_norm, "a finite number >= 0 (0: no clipping)");
}

double ema_decay_at(double decay, int64_t step) {
  const double warm = (1.0 + static_cast<double>(step)) / (10.0 + static_cast<double>(step));
  return decay < warm ? decay : warm;
}

struct Trainer::Impl {
  ModelConfig config;
  ParameterRegistry registry;
  TrainerOptions options;
  std::vector<float> params, m, v, ema, grad;
  bool grad_valid = false;
  // The next step's state is built here and swapped in on success: no allocation per step.
  std::vector<float> next_params, next_m, next_v, next_ema, trained_grad;
  int64_t completed = 0;
  std::vector<std::pair<int64_t, int64_t>> frozen;  // [offset, offset + count) of frozen tensors
  train::RopeTables<float> rope;
  std::unique_ptr<train::FastStep> fast;  // the fast path's workspace and packed weights
  std::vector<float> chain;  // data-parallel: the gradient and loss total passed between ranks
  std::shared_ptr<ThreadPool> pool;
  // Data-parallel: m, v and the EMA hold only this rank's slice's newest values (gather_state).
  bool sliced = false;

  Impl(const ModelConfig& c, const TrainerOptions& o) : config(c), registry(c), options(o), rope(c) {
    o.adamw.validate();
    if (!(o.ema_decay >= 0.0f && o.ema_decay < 1.0f))
      refuse_input("ema decay = " + number_text(o.ema_decay) + " must be in [0, 1) (0: no EMA)");
    if (o.threads < 0 || o.threads > max_threads)
      refuse_input("threads must be in [1, " + std::to_string(max_threads) + "], or 0 for one per core");
    std::set<std::string> seen;
    for (const std::string& name : o.frozen) {
      if (!seen.insert(name).second) refuse_input("frozen parameter '" + name + "' is listed twice");
      const ParameterInfo& e = registry.at(name);
      frozen.push_back({e.offset, e.offset + e.count});
    }
    pool = o.pool ? o.pool : make_thread_pool(o.threads);
    if (o.device == Device::cuda)
      throw Error(ErrorKind::unsupported, "training does not run on device 'cuda'; it trains on 'cpu' and 'reference'");
    if (o.ranks && o.ranks->size() > 1 && o.device == Device::reference)
      refuse_input("data-parallel training (" + std::to_string(o.ranks->size()) +
              " ranks) runs on the fast device; the reference device trains in one process");
  }

  int threads() const { return options.threads > 0 ? options.threads : thread_pool_size(*pool); }

  // Data-parallel ranks (more than one), else null.
  train::Distributed* several() const {
    return options.ranks && options.ranks->size() > 1 ? options.ranks.get() : nullptr;
  }
  // Rank q's slice of the parameters for the optimizer: contiguous, in rank order.
  std::pair<int64_t, int64_t> slice(int q) const {
    return train::rank_rows(static_cast<int64_t>(params.size()), q, options.ranks->size());
  }
  // Every rank's slice of v [n] from its owner to every rank: an allgather of bytes.
  void share_slices(float* v) const {
    train::Distributed& net = *options.ranks;
    std::vector<int64_t> begin;
    for (int q = 0; q < net.size(); ++q) begin.push_back(slice(q).first * static_cast<int64_t>(sizeof(float)));
    begin.push_back(static_cast<int64_t>(params.size() * sizeof(float)));
    net.allgather(v, begin);
  }

  // The benchmark's phase times (train/phase_times.hpp), when the ranks keep them.
  train::PhaseTimes* times() const { return options.ranks && options.ranks->timing ? &options.ranks->times : nullptr; }
  void lap(train::PhaseTimes::Phase phase) const {
    if (train::PhaseTimes* t = times()) t->lap(phase);
  }

  float loss_and_gradient(const IdsView& ids, float* out_grad) {
    if (options.device == Device::reference)
      return train::reference_loss_and_gradient<float>(config, rope, params.data(), ids.data, ids.rows, out_grad,
                                                       options.precision == Precision::bf16);
    if (!fast) {
      fast = std::make_unique<train::FastStep>(config, options.precision, options.simd_target);
      fast->time_phases(times());
    }
    if (out_grad && options.ranks && options.ranks->size() > 1) return ranks_loss_and_gradient(ids, out_grad);
    return fast->loss_and_gradient(*pool, threads(), rope, params, ids.data, ids.rows, out_grad);
  }

  // Data-parallel (docs/TRAINING.md, "Training on a cluster"): this rank's block of rows, the
  // gradient's chains (and the loss total's) received from the rank before, continued over the
  // block and sent to the next; the last rank's results, the whole batch's, are final and go
  // round the ring (last -> 0 -> 1 -> ... -> second last), each block as soon as it is final.
  float ranks_loss_and_gradient(const IdsView& ids, float* out_grad) {
    train::Distributed& net = *options.ranks;
    const int r = net.rank(), n = net.size();
    const bool last = r + 1 == n;
    const int64_t size = registry.total();
    const auto [b0, b1] = train::rank_rows(ids.rows, r, n);
    train::FastStep::BatchPart part;
    for (int64_t b = 0; b < ids.rows; ++b)
      for (int64_t t = 1; t < ids.cols; ++t) part.count += ids.at(b, t) != ignored_target;
    // The gradient and the loss total travel in size + 1 floats, block by block of
    // FastStep::backward_blocks() as the backward finishes them (the total last), so that a
    // rank continues a block's chains while the rank before is still computing later blocks.
    // The last rank's chains end in out_grad itself; the others keep theirs in `chain` (which
    // must stay as sent until wait_posted) and take the final blocks into out_grad.
    chain.resize(static_cast<size_t>(size + 1));
    float* buffer = chain.data();
    float total = 0.0f;  // the loss total: the last rank's, or received from it
    const std::vector<std::pair<int64_t, int64_t>> blocks = train::FastStep::backward_blocks(config);
    // Block i of the gradient in `base` (chain or out_grad); i == blocks.size(): the loss total,
    // chain[size] in the chain, else `total`.
    auto region = [&](float* base, size_t i) -> std::pair<float*, int64_t> {
      if (i < blocks.size()) return {base + blocks[i].first, blocks[i].second};
      return {base == chain.data() ? base + size : &total, 1};
    };
    // The final blocks come from the last rank to rank 0, from rank r - 1 to the others, and
    // ranks 0 to n - 3 pass each on as it arrives (checked whenever this rank sends or receives
    // a block of the chain, and at the end).
    std::vector<size_t> finals;
    size_t forwarded = 0;
    const bool forwards = r + 2 < n;
    auto forward = [&](bool wait) {
      if (!forwards) return;
      while (forwarded < finals.size() && net.final_arrived(finals[forwarded], wait)) {
        const auto [at, count] = region(out_grad, forwarded);
        net.post_final_to(r + 1, at, count);
        ++forwarded;
      }
    };
    if (last) {
      buffer = out_grad;
    } else {
      for (size_t i = 0; i <= blocks.size(); ++i) {
        const auto [at, count] = region(out_grad, i);
        finals.push_back(net.post_final_receive(at, count, r == 0 ? n - 1 : r - 1));
      }
    }
    part.continued = r > 0;  // rank 0 always has rows (rank_rows gives the first ranks more)
    if (r > 0)
      part.receive = [&](size_t i) {
        const auto [at, count] = region(buffer, i);
        net.receive_from_previous(at, count);
        if (i == blocks.size()) part.total = *at;
        forward(false);
      };
    part.send = [&](size_t i) {
      const auto [at, count] = region(buffer, i);
      if (!last) {
        net.post_to_next(at, count);
        forward(false);
      } else {
        net.post_final_to(0, at, count);
      }
    };
    if (b1 > b0) {
      const float here = fast->loss_and_gradient(*pool, threads(), rope, params, ids.data + b0 * ids.cols, b1 - b0,
                                                 buffer, &part);
      *region(buffer, blocks.size()).first = here;
      part.send(blocks.size());
      lap(train::PhaseTimes::send);
    } else {  // no rows here: pass every block on as it comes
      for (size_t i = 0; i <= blocks.size(); ++i) {
        part.receive(i);
        part.send(i);
      }
    }
    forward(true);
    net.wait_posted();  // what this rank sent may change after
    lap(train::PhaseTimes::send);
    if (!last) net.wait_final();
    lap(train::PhaseTimes::share);
    return total / static_cast<float>(part.count);
  }
};

// The trainer's backward covers the base architecture only: a model with biases or RoPE scaling
// (an imported Qwen2 or Llama 3) is refused until it has their gradients.
static void refuse_untrainable(const ModelConfig& config) {
  std::string what;
  if (config.qkv_bias) what = "biases on q, k and v (qkv_bias)";
  if (config.o_bias) what += std::string(what.empty() ? "" : ", ") + "a bias on the attention output (o_bias)";
  if (config.rope_scaling) what += std::string(what.empty() ? "" : ", ") + "Llama 3 RoPE scaling (rope_scaling)";
  if (!what.empty())
    throw Error(ErrorKind::unsupported, "the trainer cannot train this model: it has " + what +
                                            ", whose backward lockstep does not have yet");
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

Trainer::Trainer(const ModelConfig& config, std::span<const float> parameters, const TrainerOptions& options) {
  config.validate();
  refuse_untrainable(config);
  auto impl = std::make_unique<Impl>(config, options);
  if (static_cast<int64_t>(parameters.size()) != impl->registry.total())
    refuse_input("parameters must hold " + std::to_string(impl->registry.total()) + " float32 values, got " +
            std::to_string(parameters.size()));
  check_finite(parameters, "parameters");
  impl->params.assign(parameters.begin(), parameters.end());
  impl->m.assign(parameters.size(), 0.0f);
  impl->v.assign(parameters.size(), 0.0f);
  if (options.ema_decay > 0.0f) impl->ema = impl->params;
  impl_ = std::move(impl);
}

Trainer Trainer::from_state(const ModelConfig& config, TrainerState state, const TrainerOptions& options) {
  config.validate();
  refuse_untrainable(config);
  auto impl = std::make_unique<Impl>(config, options);
  const size_t n = static_cast<size_t>(impl->registry.total());
  auto check = [&](const std::vector<float>& v, const char* name) {
    if (v.size() != n) refuse_input(std::string(name) + " must hold " + std::to_string(n) + " float32 values, got " + std::to_string(v.size()));
    check_finite(v, name);
  };
  check(state.parameters, "parameters");
  check(state.m, "m");
  check(state.v, "v");
  for (size_t i = 0; i < n; ++i)
    if (state.v[i] < 0.0f) refuse_input("v must not be negative; element " + std::to_string(i) + " is " + std::to_string(state.v[i]));
  if (options.ema_decay > 0.0f) {
    if (state.ema.empty()) state.ema = state.parameters;
    check(state.ema, "ema");
  } else if (!state.ema.empty()) {
    refuse_input("an EMA was given but the options keep none (ema_decay 0)");
  }
  if (state.completed_steps < 0) refuse_input("completed_steps must not be negative");
  impl->params = std::move(state.parameters);
  impl->m = std::move(state.m);
  impl->v = std::move(state.v);
  impl->ema = std::move(state.ema);
  impl->completed = state.completed_steps;
  return Trainer(std::move(impl));
}

uint32_t Trainer::train_step(const IdsView& ids, std::optional<float> lr) {
  Impl& s = *impl_;
  s.grad_valid = false;
  check_ids(s.config, ids);
  const float rate = lr.value_or(s.options.adamw.lr);
  if (lr) {
    AdamWOptions check = s.options.adamw;
    check.lr = rate;
    check.validate();
  }
  FloatEnvScope env;
  const size_t n = s.params.size();
  s.grad.resize(n);
  const float loss = s.loss_and_gradient(ids, s.grad.data());
  if (!std::isfinite(loss))
    throw Error(ErrorKind::state, "the loss of step " + std::to_string(s.completed + 1) + " is not finite (" +
                                      number_text(loss) + "); the step was not applied");
  // The first non-finite element, each worker searching its own range. Data-parallel, each rank
  // checks (and sums the squares of) its own whole blocks of ref::kNormBlock elements, and the
  // ranks share what they found and their blocks' sums (bytes).
  const int workers = s.options.device == Device::reference ? 1 : s.threads();
  train::Distributed* const ranks = s.several();
  const int64_t norm_blocks = (static_cast<int64_t>(n) + ref::kNormBlock - 1) / ref::kNormBlock;
  const auto [nb0, nb1] = ranks ? train::rank_rows(norm_blocks, ranks->rank(), ranks->size())
                                : std::pair<int64_t, int64_t>{0, norm_blocks};
  const int64_t c0 = nb0 * ref::kNormBlock, c1 = std::min(static_cast<int64_t>(n), nb1 * ref::kNormBlock);
  std::vector<int64_t> first_bad(static_cast<size_t>(workers), -1);
  s.pool->run(workers, [&](int w, int nw) {
    const auto [b, e] = static_range(c1 - c0, w, nw);
    for (int64_t i = c0 + b; i < c0 + e; ++i)
      if (!std::isfinite(s.grad[static_cast<size_t>(i)])) {
        first_bad[static_cast<size_t>(w)] = i;
        break;
      }
  });
  if (ranks) {  // each rank's first, in rank order
    int64_t mine = -1;
    for (const int64_t i : first_bad)
      if (i >= 0 && mine < 0) mine = i;
    first_bad.assign(static_cast<size_t>(ranks->size()), -1);
    first_bad[static_cast<size_t>(ranks->rank())] = mine;
    std::vector<int64_t> begin;
    for (int q = 0; q <= ranks->size(); ++q) begin.push_back(q * static_cast<int64_t>(sizeof(int64_t)));
    ranks->allgather(first_bad.data(), begin);
  }
  for (const int64_t i : first_bad)
    if (i >= 0)
      throw Error(ErrorKind::state, "the gradient of step " + std::to_string(s.completed + 1) +
                                        " is not finite at element " + std::to_string(i) + "; the step was not applied");
  // Frozen tensors take no update: their gradient leaves the norm and the update.
  const float* g = s.grad.data();
  if (!s.frozen.empty()) {
    s.trained_grad = s.grad;
    for (const auto& [begin, end] : s.frozen) std::fill(s.trained_grad.begin() + begin, s.trained_grad.begin() + end, 0.0f);
    g = s.trained_grad.data();
  }
  const int64_t t = s.completed + 1;
  // The reference device runs ref's loops; the fast one their SIMD twins (the same bits).
  const simd::Kernels* k = s.fast ? &s.fast->kernels() : nullptr;
  float scale = 1.0f;
  if (s.options.adamw.clip_norm > 0.0f && !ranks) {
    scale = ref::clip_scale(train::gradient_sum_of_squares(k, *s.pool, workers, g, static_cast<int64_t>(n)),
                            s.options.adamw.clip_norm);
  } else if (s.options.adamw.clip_norm > 0.0f) {  // this rank's blocks, then every rank's, added in order
    std::vector<double> sums(static_cast<size_t>(norm_blocks));
    train::gradient_block_sums(*k, *s.pool, workers, g, static_cast<int64_t>(n), nb0, nb1, sums.data());
    std::vector<int64_t> begin;
    for (int q = 0; q < ranks->size(); ++q)
      begin.push_back(train::rank_rows(norm_blocks, q, ranks->size()).first * static_cast<int64_t>(sizeof(double)));
    begin.push_back(norm_blocks * static_cast<int64_t>(sizeof(double)));
    ranks->allgather(sums.data(), begin);
    scale = ref::clip_scale(train::sum_in_order(sums), s.options.adamw.clip_norm);
  }
  s.lap(train::PhaseTimes::checks);
  const AdamWOptions& o = s.options.adamw;
  const ref::AdamWScalars scalars = ref::adamw_scalars(rate, o.beta1, o.beta2, o.eps, o.weight_decay, t);
  s.next_params.resize(n);
  s.next_m.resize(n);
  s.next_v.resize(n);
  s.next_ema.resize(s.ema.size());
  const double ema_decay = s.options.ema_decay > 0.0f ? ema_decay_at(s.options.ema_decay, t) : 0.0;
  // Element-wise and independent: split across the pool (any split gives the same bits).
  const bool has_ema = !s.ema.empty();
  const train::OptimizerBuffers buffers{g, s.params.data(), s.m.data(), s.v.data(), has_ema ? s.ema.data() : nullptr,
                                        s.next_params.data(), s.next_m.data(), s.next_v.data(),
                                        has_ema ? s.next_ema.data() : nullptr};
  // Data-parallel: this rank's slice only; the new parameters are shared below.
  const auto [u0, u1] = ranks ? s.slice(ranks->rank()) : std::pair<int64_t, int64_t>{0, static_cast<int64_t>(n)};
  s.pool->run(workers, [&](int w, int nw) {
    const auto [b, e] = static_range(u1 - u0, w, nw);
    train::update_range(k, scalars, scale, ema_decay, buffers, u0 + b, u0 + e);
  });
  for (const auto& [begin, end] : s.frozen) {
    std::copy(s.params.begin() + begin, s.params.begin() + end, s.next_params.begin() + begin);
    std::copy(s.m.begin() + begin, s.m.begin() + end, s.next_m.begin() + begin);
    std::copy(s.v.begin() + begin, s.v.begin() + end, s.next_v.begin() + begin);
    if (!s.ema.empty()) std::copy(s.ema.begin() + begin, s.ema.begin() + end, s.next_ema.begin() + begin);
  }
  // Commit: nothing below can fail.
  s.params.swap(s.next_params);
  s.m.swap(s.next_m);
  s.v.swap(s.next_v);
  s.ema.swap(s.next_ema);
  s.grad_valid = true;
  s.completed = t;
  s.lap(train::PhaseTimes::optimizer);
  if (ranks) {
    s.share_slices(s.params.data());
    s.sliced = true;
    s.lap(train::PhaseTimes::share);
  }
  return std::bit_cast<uint32_t>(loss);
}

void Trainer::gather_state() {
  Impl& s = *impl_;
  if (!s.sliced) return;
  s.share_slices(s.m.data());
  s.share_slices(s.v.data());
  if (!s.ema.empty()) s.share_slices(s.ema.data());
  s.sliced = false;
}

uint32_t Trainer::loss_bits(const IdsView& ids) const {
  Impl& s = *impl_;
  check_ids(s.config, ids);
  FloatEnvScope env;
  return std::bit_cast<uint32_t>(s.loss_and_gradient(ids, nullptr));
}

const ModelConfig& Trainer::config() const { return impl_->config; }
const TrainerOptions& Trainer::options() const { return impl_->options; }
std::span<const float> Trainer::parameters() const { return impl_->params; }
std::span<const float> Trainer::m() const { return impl_->m; }
std::span<const float> Trainer::v() const { return impl_->v; }
std::span<const float> Trainer::ema() const { return impl_->ema; }
std::span<const float> Trainer::gradient() const {
  return impl_->grad_valid ? std::span<const float>(impl_->grad) : std::span<const float>();
}
int64_t Trainer::completed_steps() const { return impl_->completed; }
std::string Trainer::parameters_sha256() const { return sha256_f32_le(impl_->params); }

TrainerState Trainer::state() const {
  return {impl_->params, impl_->m, impl_->v, impl_->ema, impl_->completed};
}

}  // namespace lockstep
