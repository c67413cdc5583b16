// One-step training: forward, backward and AdamW on the CPU, with the same bits on the reference
// and the fast path at any thread count (docs/ARITHMETIC.md, "Training").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

namespace train {
class Distributed;  // the ranks of a data-parallel job (src/train/distributed.hpp)
}

struct AdamWOptions {
  float lr = 1e-3f;  // the rate train_step uses when the call gives none
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // decoupled: p = p * (1 - lr * weight_decay) - ...
  float clip_norm = 0.0f;      // > 0: gradients scaled so their global L2 norm is at most this
  // Throws Error(invalid_argument) naming the first value out of range: lr > 0 finite,
  // 0 <= beta < 1, eps > 0, weight_decay >= 0, clip_norm >= 0.
  void validate() const;
};

struct TrainerOptions {
  Device device = Device::cpu;
  int threads = 0;  // 0: one per physical core
  std::shared_ptr<ThreadPool> pool;
  Precision precision = Precision::f32;  // bf16: matmul operands rounded, f32 master weights
  AdamWOptions adamw;
  float ema_decay = 0.0f;  // in (0, 1): keep an exponential moving average of the weights
  // Registry tensors that are not trained (a run's frozen :load parameters): their gradient is
  // computed but AdamW leaves them, and their moments, as they are.
  std::vector<std::string> frozen;
  std::string simd_target;  // as ModelOptions::simd_target
  // Data-parallel training (run_training sets it under mpirun): each rank computes its block of
  // the batch's rows and the gradient's chains pass from rank to rank in row order, so every
  // rank holds the single process's gradient bits. Null or one rank: the whole batch here.
  // The fast device only. Each rank then applies AdamW and the EMA to its own slice of the
  // parameters, and the new parameters are shared (bytes, no arithmetic): every rank holds all
  // the parameters after each step, but m(), v(), ema() and state() hold the other ranks' slices
  // only after gather_state().
  std::shared_ptr<train::Distributed> ranks;
};

// Everything a step reads and writes, for checkpoints and resuming.
struct TrainerState {
  std::vector<float> parameters;  // flat, registry order
  std::vector<float> m, v;        // AdamW moments, same layout (zeros before the first step)
  std::vector<float> ema;         // the EMA of the parameters; empty without EMA
  int64_t completed_steps = 0;
};

class Trainer {
 public:
  // Fresh state from parameters (moments zero, EMA = parameters when enabled, step 0).
  Trainer(const ModelConfig& config, std::span<const float> parameters, const TrainerOptions& options = {});
  // Resumes a recorded state; refuses moments or EMA of the wrong size or non-finite values.
  static Trainer from_state(const ModelConfig& config, TrainerState state, const TrainerOptions& options = {});
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // One step on ids [batch, length + 1] (the loss layout: -100 allowed in the last column), at
  // learning rate `lr` (the options' when absent). Returns the bits of the loss of the forward
  // pass before the update. On success the parameters, moments, EMA and step count advance and
  // gradient() holds this step's gradient. On failure (bad ids, a non-finite loss or gradient)
  // it throws, and none of them move; gradient() is cleared.
  uint32_t train_step(const IdsView& ids, std::optional<float> lr = std::nullopt);

  // Data-parallel: brings every rank's slice of m, v and the EMA to every rank, so that m(),
  // v(), ema() and state() are whole. Every rank must call it at the same step (run_training
  // does before each checkpoint and evaluation). Nothing to do in one process.
  void gather_state();

  // The mean loss of ids [batch, length + 1] under the current parameters, without training.
  uint32_t loss_bits(const IdsView& ids) const;

  const ModelConfig& config() const;
  const TrainerOptions& options() const;
  std::span<const float> parameters() const;
  std::span<const float> m() const;
  std::span<const float> v() const;
  std::span<const float> ema() const;       // empty without EMA
  std::span<const float> gradient() const;  // empty before a step and after a failed one
  int64_t completed_steps() const;
  std::string parameters_sha256() const;
  TrainerState state() const;

  struct Impl;

 private:
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The EMA decay at step t (1-based) of a run with decay d: min(d, (1 + t) / (10 + t)), so that an
// early checkpoint's averages weigh the recent weights heavily rather than the initial ones.
double ema_decay_at(double decay, int64_t step);

}  // namespace lockstep
