// RMSNorm (docs/ARITHMETIC.md, "rmsnorm"), one block per row. The sum of squares is one chain in
// increasing i, so one thread runs it (phase 1: thread 0, into the block's shared `r`); after
// the barrier every thread scales its elements (phase 2): y[i] = (x[i] * r) * w[i].
#pragma once

#include "kernels/cuda/arith.hpp"

namespace lockstep::cuda {

struct RmsNormArgs {
  const float* x;        // rows of n, `x_stride` apart
  const int32_t* gather; // null: y's row r reads x's row r; else x's row gather[r]
  const float* w;        // [n]
  float* y;              // [rows, n]
  int64_t rows;
  int32_t n;
  int64_t x_stride;
  float eps;
};

inline constexpr int32_t kNormThreads = 128;

struct RmsNormShared {
  float r;
};

LOCKSTEP_HD inline const float* rmsnorm_row(const RmsNormArgs& a, int64_t row) {
  return a.x + (a.gather ? static_cast<int64_t>(a.gather[row]) : row) * a.x_stride;
}

// Phase 1 (thread 0 of block `row`): r = 1 / sqrt(ss / n + eps), ss the fma chain of x[i]^2.
LOCKSTEP_HD inline void rmsnorm_phase_scale(const RmsNormArgs& a, ThreadAt at, RmsNormShared& shared) {
  if (at.thread != 0) return;
  const float* x = rmsnorm_row(a, at.block_x);
  float ss = 0.0f;
  for (int32_t i = 0; i < a.n; ++i) ss = fma_rn(x[i], x[i], ss);
  const float mean = div_rn(ss, static_cast<float>(a.n));
  shared.r = div_rn(1.0f, sqrt_rn(add_rn(mean, a.eps)));
}

// Phase 2 (every thread): y[i] = (x[i] * r) * w[i] for i = thread, thread + blockDim, ...
LOCKSTEP_HD inline void rmsnorm_phase_apply(const RmsNormArgs& a, ThreadAt at, const RmsNormShared& shared) {
  const float* x = rmsnorm_row(a, at.block_x);
  float* y = a.y + at.block_x * a.n;
  for (int32_t i = at.thread; i < a.n; i += kNormThreads) y[i] = mul_rn(mul_rn(x[i], shared.r), a.w[i]);
}

}  // namespace lockstep::cuda
