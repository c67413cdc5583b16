// The reference training step: forward with stored activations, then backward, for a batch of
// full-window rows, through the reference kernels (docs/ARITHMETIC.md, "Training"). A template
// over the scalar type: the f32 instance is the profile, the fast path's oracle; the f64 instance
// runs the same formulas for the finite-difference gradient checks.
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep::train {

template <typename T>
struct RopeTables {
  std::vector<T> cos, sin;  // [length, head_dim / 2]
  explicit RopeTables(const ModelConfig& c);
};

// The mean next-token loss of ids [rows, length + 1] (columns [0, length) the inputs, [1, length]
// the targets, -100 ignored in the last column) and, when `grad` is not null, its gradient with
// respect to every parameter, flat in registry order (overwritten). `bf16` (f32 only) rounds both
// operands of every weight matmul, forward and backward, to bf16.
template <typename T>
T reference_loss_and_gradient(const ModelConfig& config, const RopeTables<T>& rope, const T* params,
                              const int32_t* ids, int64_t rows, T* grad, bool bf16 = false);

}  // namespace lockstep::train
