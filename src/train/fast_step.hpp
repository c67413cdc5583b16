// The fast training step: the reference step's arithmetic (train/reference_step.cpp) with the
// SIMD kernels, packed weights and the thread pool. Every matmul of the backward pass is the
// matmul kernel over a packed operand: dx = dy @ W^T with W^T packed each step, and
// dW = x^T @ dy with x read in place (matmul_at) and dy packed row by row by the workers that
// make its rows, so each output stays one chain in the reference's order, and threads split
// only outputs.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/simd/kernels.hpp"
#include "lockstep/config.hpp"
#include "lockstep/model.hpp"
#include "train/reference_step.hpp"

namespace lockstep::train {

class FastStep {
 public:
  FastStep(const ModelConfig& config, Precision precision, const std::string& simd_target);
  ~FastStep();

  // As reference_loss_and_gradient<float>, bit for bit, on `threads` workers of `pool`.
  float loss_and_gradient(ThreadPool& pool, int threads, const RopeTables<float>& rope,
                          std::span<const float> params, const int32_t* ids, int64_t rows, float* grad);

  // The SIMD target this step runs (also the optimizer's passes on the fast path).
  const simd::Kernels& kernels() const { return *kernels_; }

  struct Workspace;

 private:
  ModelConfig config_;
  ParameterRegistry registry_;
  bool bf16_;
  const simd::Kernels* kernels_;
  std::unique_ptr<Workspace> ws_;
};

}  // namespace lockstep::train
