// RoPE (docs/ARITHMETIC.md, "rope") on the q and k parts of each row of the fused qkv
// [rows, q_dim + 2 kv_dim], in place, at each row's own position: one thread per pair
// (v[2i], v[2i+1]) of a head: v0' = v0 c - v1 s, v1' = v0 s + v1 c (each product rounded). The
// biases, where the model has them, were added by the matmul's epilogue before (bias, then rope).
#pragma once

#include "kernels/cuda/arith.hpp"

namespace lockstep::cuda {

struct RopeArgs {
  float* qkv;            // [rows, stride]: q heads at 0, k heads at q_dim
  const int32_t* pos;    // [rows]: each row's position
  const float* cos;      // [length, head_dim / 2]
  const float* sin;
  int64_t rows;
  int64_t stride;
  int32_t n_heads, n_kv_heads, head_dim;
};

inline constexpr int32_t kRopeThreads = 256;

inline int64_t rope_pairs_per_row(const RopeArgs& a) {
  return static_cast<int64_t>(a.n_heads + a.n_kv_heads) * (a.head_dim / 2);
}
inline int64_t rope_blocks(const RopeArgs& a) {
  return (a.rows * rope_pairs_per_row(a) + kRopeThreads - 1) / kRopeThreads;
}

LOCKSTEP_HD inline void rope_body(const RopeArgs& a, ThreadAt at) {
  const int32_t half = a.head_dim / 2;
  const int64_t per_row = static_cast<int64_t>(a.n_heads + a.n_kv_heads) * half;
  const int64_t e = at.block_x * kRopeThreads + at.thread;
  if (e >= a.rows * per_row) return;
  const int64_t r = e / per_row, p = e % per_row;
  // Pair p of the row: head p / half (q heads first, then k heads, which follow q contiguously
  // in the fused row), pair i within it.
  const int64_t head = p / half, i = p % half;
  float* v = a.qkv + r * a.stride + head * a.head_dim + 2 * i;
  const float c = a.cos[static_cast<int64_t>(a.pos[r]) * half + i];
  const float s = a.sin[static_cast<int64_t>(a.pos[r]) * half + i];
  const float v0 = v[0], v1 = v[1];
  v[0] = sub_rn(mul_rn(v0, c), mul_rn(v1, s));
  v[1] = add_rn(mul_rn(v0, s), mul_rn(v1, c));
}

}  // namespace lockstep::cuda
