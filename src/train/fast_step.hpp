// The fast training step: the reference step's arithmetic (train/reference_step.cpp) with the
// SIMD kernels, packed weights and the thread pool. Every matmul of the backward pass is the
// matmul kernel over a packed operand: dx = dy @ W^T with W^T packed each step, and
// dW = x^T @ dy with x read in place (matmul_at) and dy packed row by row by the workers that
// make its rows, so each output stays one chain in the reference's order, and threads split
// only outputs.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/simd/kernels.hpp"
#include "lockstep/config.hpp"
#include "lockstep/model.hpp"
#include "train/phase_times.hpp"
#include "train/reference_step.hpp"

namespace lockstep::train {

class FastStep {
 public:
  FastStep(const ModelConfig& config, Precision precision, const std::string& simd_target);
  ~FastStep();

  // One rank's block of a data-parallel batch (train/distributed.hpp): `count`, the counted
  // targets of the whole batch (the loss's divisor); with `continued`, grad holds the
  // accumulators of every chain over rows as the rows before this block left them, and each
  // chain (weight, norm-weight and embedding gradients) continues from them in row order.
  //
  // Pipelined (`receive` and `send` set): the accumulators travel block by block of
  // backward_blocks() instead of whole. receive(i) is called (by one worker, the others
  // waiting) just before block i's chains continue here, send(i) once they are final here, in
  // increasing i; i == backward_blocks().size() stands for the loss total, which receive() must
  // write to `total` (sent by the caller, from the return value).
  struct BatchPart {
    int64_t count = 0;
    bool continued = false;
    float total = 0.0f;  // the loss total's chain before this block; the call continues it
    std::function<void(size_t)> receive, send;
  };

  // As reference_loss_and_gradient<float>, bit for bit, on `threads` workers of `pool`. With a
  // `part`, the rows are that block of a larger batch and the return is part->total continued
  // over them (the sum, not yet divided by the count).
  float loss_and_gradient(ThreadPool& pool, int threads, const RopeTables<float>& rope,
                          std::span<const float> params, const int32_t* ids, int64_t rows, float* grad,
                          const BatchPart* part = nullptr);

  // The SIMD target this step runs (also the optimizer's passes on the fast path).
  const simd::Kernels& kernels() const { return *kernels_; }

  struct Workspace;

  // Sums the time of each phase of later calls into `times` (null: none), from the calling
  // thread (worker 0); for the benchmark, never changing a bit.
  void time_phases(PhaseTimes* times) { times_ = times; }

  // [offset, offset + count) of the gradient, one per tensor, in the order the backward
  // finishes their chains: head, final_norm, then from the last layer down each layer's w_down,
  // w_gate, w_up, mlp_norm, wo, wq, wk, wv, attn_norm, then embed.
  static std::vector<std::pair<int64_t, int64_t>> backward_blocks(const ModelConfig& config);

 private:
  ModelConfig config_;
  ParameterRegistry registry_;
  bool bf16_;
  const simd::Kernels* kernels_;
  std::unique_ptr<Workspace> ws_;
  PhaseTimes* times_ = nullptr;
};

}  // namespace lockstep::train
