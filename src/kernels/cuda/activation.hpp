// SwiGLU (docs/ARITHMETIC.md, "swiglu"): h[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)),
// from the fused gate_up [rows, 2 ff] (gate at column i, up at ff + i). One thread per element.
#pragma once

#include "kernels/cuda/arith.hpp"

namespace lockstep::cuda {

struct SwigluArgs {
  const float* gate_up;  // [rows, 2 ff]
  float* h;              // [rows, ff]
  int64_t rows;
  int32_t ff;
};

inline constexpr int32_t kSwigluThreads = 256;

inline int64_t swiglu_blocks(const SwigluArgs& a) {
  return (a.rows * a.ff + kSwigluThreads - 1) / kSwigluThreads;
}

LOCKSTEP_HD inline void swiglu_body(const SwigluArgs& a, ThreadAt at) {
  const int64_t e = at.block_x * kSwigluThreads + at.thread;
  if (e >= a.rows * a.ff) return;
  const int64_t r = e / a.ff, i = e % a.ff;
  const float g = a.gate_up[r * 2 * a.ff + i];
  const float u = a.gate_up[r * 2 * a.ff + a.ff + i];
  const float ex = exp_f32(-g);
  a.h[e] = mul_rn(div_rn(g, add_rn(1.0f, ex)), u);
}

}  // namespace lockstep::cuda
