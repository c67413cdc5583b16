// Causal attention (docs/ARITHMETIC.md, "attention"), one block per (query row, head), over the
// keys and values of the row's own sequence at positions [0, t]. The fused qkv rows of a
// sequence are consecutive: row r at position t has its sequence's position 0 at row r - t.
//   phase `query`:  q into shared memory (threads d < head_dim)
//   phase `scores`: s_j = dot(q, k_j) * scale for j = thread, thread + blockDim, ... (each dot a
//                   chain in increasing d), into `scores`; each thread's running max (NaN
//                   skipped) into shared `part_max`
//   phase `max`:    thread 0: m = the max of the threads' maxima (the max's value does not depend
//                   on the order it is taken in; docs/ARITHMETIC.md, "max")
//   phase `exp`:    e_j = exp(s_j - m) in place, j split as for the scores
//   phase `sum`:    each thread d < head_dim runs l = l + e_j and acc = fma(e_j, v_j[d], acc) in
//                   increasing j from +0 (every such thread computes the same l), then
//                   out[d] = acc / l
// `scores` is global scratch: [rows, n_heads, score_stride] floats, score_stride >= t + 1.
#pragma once

#include "kernels/cuda/arith.hpp"

namespace lockstep::cuda {

inline constexpr int32_t kAttentionThreads = 128;
inline constexpr int32_t kMaxHeadDim = 512;  // the query's shared copy; a larger head is refused

struct AttentionArgs {
  const float* qkv;     // [rows, stride]: q heads, then k heads at q_dim, v heads at q_dim + kv_dim
  const int32_t* pos;   // [rows]
  float* out;           // [rows, n_heads * head_dim]
  float* scores;        // [rows, n_heads, score_stride], scratch
  int64_t rows;         // blocks x: the rows of this launch, from row `row0`
  int64_t row0;
  int64_t stride;
  int64_t score_stride;
  int32_t n_heads, n_kv_heads, head_dim;
  float scale;
};

struct AttentionShared {
  float q[kMaxHeadDim];
  float part_max[kAttentionThreads];
  float m;
};

struct AttentionPlace {
  int64_t r, t;
  const float* q;
  const float* k0;  // position 0's key of this head's key/value head
  const float* v0;
  float* scores;
};

LOCKSTEP_HD inline AttentionPlace attention_place(const AttentionArgs& a, ThreadAt at) {
  AttentionPlace p;
  p.r = a.row0 + at.block_x;
  p.t = a.pos[p.r];
  const int32_t h = at.block_y;
  const int32_t kv_head = h / (a.n_heads / a.n_kv_heads);
  const int64_t q_dim = static_cast<int64_t>(a.n_heads) * a.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(a.n_kv_heads) * a.head_dim;
  const float* first = a.qkv + (p.r - p.t) * a.stride;
  p.q = a.qkv + p.r * a.stride + static_cast<int64_t>(h) * a.head_dim;
  p.k0 = first + q_dim + static_cast<int64_t>(kv_head) * a.head_dim;
  p.v0 = first + q_dim + kv_dim + static_cast<int64_t>(kv_head) * a.head_dim;
  p.scores = a.scores + (at.block_x * a.n_heads + h) * a.score_stride;
  return p;
}

LOCKSTEP_HD inline void attention_phase_query(const AttentionArgs& a, ThreadAt at, AttentionShared& s) {
  const AttentionPlace p = attention_place(a, at);
  for (int32_t d = at.thread; d < a.head_dim; d += kAttentionThreads) s.q[d] = p.q[d];
}

LOCKSTEP_HD inline void attention_phase_scores(const AttentionArgs& a, ThreadAt at, AttentionShared& s) {
  const AttentionPlace p = attention_place(a, at);
  float m = -kInfinity;
  for (int64_t j = at.thread; j <= p.t; j += kAttentionThreads) {
    const float* k = p.k0 + j * a.stride;
    float dot = 0.0f;
    for (int32_t d = 0; d < a.head_dim; ++d) dot = fma_rn(s.q[d], k[d], dot);
    const float score = mul_rn(dot, a.scale);
    p.scores[j] = score;
    m = max_skip_nan(m, score);
  }
  s.part_max[at.thread] = m;
}

LOCKSTEP_HD inline void attention_phase_max(const AttentionArgs& a, ThreadAt at, AttentionShared& s) {
  if (at.thread != 0) return;
  float m = -kInfinity;
  for (int32_t i = 0; i < kAttentionThreads; ++i) m = max_skip_nan(m, s.part_max[i]);
  s.m = m;
}

LOCKSTEP_HD inline void attention_phase_exp(const AttentionArgs& a, ThreadAt at, const AttentionShared& s) {
  const AttentionPlace p = attention_place(a, at);
  for (int64_t j = at.thread; j <= p.t; j += kAttentionThreads) p.scores[j] = exp_f32(sub_rn(p.scores[j], s.m));
}

LOCKSTEP_HD inline void attention_phase_sum(const AttentionArgs& a, ThreadAt at) {
  const AttentionPlace p = attention_place(a, at);
  float* out = a.out + p.r * static_cast<int64_t>(a.n_heads) * a.head_dim + static_cast<int64_t>(at.block_y) * a.head_dim;
  for (int32_t d = at.thread; d < a.head_dim; d += kAttentionThreads) {
    float l = 0.0f, acc = 0.0f;
    for (int64_t j = 0; j <= p.t; ++j) {
      const float e = p.scores[j];
      l = add_rn(l, e);
      acc = fma_rn(e, p.v0[j * a.stride + d], acc);
    }
    out[d] = div_rn(acc, l);
  }
}

}  // namespace lockstep::cuda
