// The CUDA forward pass as a sequence of kernel launches (docs/ARITHMETIC.md, "The forward
// pass"), written once over a `Launch` that either launches the kernels on the GPU (device.cu)
// or runs their bodies on the host over the same grid (host_launch.hpp): the order of launches,
// the buffers and every argument are this one function's, on both.
//
// Launch provides embed, rmsnorm, matmul, rope, attention and swiglu, each taking the kernel's
// Args (kernels/cuda/*.hpp) with pointers into the memory it runs on.
#pragma once

#include <algorithm>

#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/embed.hpp"
#include "kernels/cuda/layout.hpp"
#include "kernels/cuda/matmul.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/rope.hpp"

namespace lockstep::cuda {

// The batch's memory, on the launch's side. Rows are the flattened positions (BatchLayout).
struct ForwardBuffers {
  const int32_t* ids;      // [rows]
  const int32_t* pos;      // [rows]
  const int32_t* outputs;  // [n_outputs]: flat rows whose outputs are wanted
  float* x;                // [rows, d]: the residual stream
  float* xn;               // [rows, d]
  float* qkv;              // [rows, q_dim + 2 kv_dim]
  float* att;              // [rows, q_dim]
  float* gate_up;          // [rows, 2 ff]
  float* h;                // [rows, ff]
  float* scores;           // [attention_rows, n_heads, score_stride]
  float* hidden;           // [n_outputs, d]
  float* logits;           // [n_outputs, vocab], or null: no head
  int64_t rows, n_outputs;
  int64_t attention_rows;  // rows per attention launch (the scores scratch's first dimension)
  int64_t score_stride;    // >= the longest row's positions
};

// Rows per attention launch: all of them, unless their scores would pass 2^26 floats (256 MiB).
inline int64_t attention_rows_for(const ForwardShape& s, int64_t rows, int64_t score_stride) {
  const int64_t per_row = static_cast<int64_t>(s.n_heads) * score_stride;
  return std::max<int64_t>(1, std::min<int64_t>(rows, (int64_t{1} << 26) / per_row));
}

// The floats each buffer needs for a batch.
struct ForwardSizes {
  int64_t x, qkv, att, gate_up, h, scores, hidden, logits;
};
inline ForwardSizes forward_sizes(const ForwardShape& s, int64_t rows, int64_t n_outputs, int64_t attention_rows,
                                  int64_t score_stride, bool logits) {
  return {rows * s.d, rows * s.qkv_width(), rows * s.q_dim(), rows * 2 * s.ff, rows * s.ff,
          attention_rows * s.n_heads * score_stride, n_outputs * s.d, logits ? n_outputs * s.vocab : 0};
}

// Weight pointers from the arena's base on the launch's side.
template <class Launch>
void run_forward(Launch& launch, const ForwardShape& s, const WeightArena& w, const float* base,
                 const ForwardBuffers& b) {
  const int64_t R = b.rows, d = s.d, q = s.q_dim(), width = s.qkv_width(), ff = s.ff;
  launch.embed(EmbedArgs{b.ids, base + w.embed, b.x, R, s.d});
  for (const ArenaLayer& l : w.layers) {
    // Attention: xn = rmsnorm(x); qkv = xn @ [wq | wk | wv] (+ [bq | bk | bv]); RoPE on q, k.
    launch.rmsnorm(RmsNormArgs{b.x, nullptr, base + l.attn_norm, b.xn, R, s.d, d, s.eps});
    launch.matmul(MatmulArgs{b.xn, base + l.wqkv, b.qkv, l.bqkv >= 0 ? base + l.bqkv : nullptr, R, d, width, d,
                             width, width, false, s.bf16});
    launch.rope(RopeArgs{b.qkv, b.pos, base + w.rope_cos, base + w.rope_sin, R, width, s.n_heads, s.n_kv_heads,
                         s.head_dim});
    for (int64_t row0 = 0; row0 < R; row0 += b.attention_rows) {
      launch.attention(AttentionArgs{b.qkv, b.pos, b.att, b.scores, std::min(b.attention_rows, R - row0), row0,
                                     width, b.score_stride, s.n_heads, s.n_kv_heads, s.head_dim, s.scale});
    }
    // x = x + (att @ wo (+ bo))
    launch.matmul(MatmulArgs{b.att, base + l.wo, b.x, l.bo >= 0 ? base + l.bo : nullptr, R, q, d, q, d, d, true,
                             s.bf16});
    // MLP: x = x + swiglu(xn @ w_gate, xn @ w_up) @ w_down, xn = rmsnorm(x)
    launch.rmsnorm(RmsNormArgs{b.x, nullptr, base + l.mlp_norm, b.xn, R, s.d, d, s.eps});
    launch.matmul(MatmulArgs{b.xn, base + l.w_gate_up, b.gate_up, nullptr, R, d, 2 * ff, d, 2 * ff, 2 * ff, false,
                             s.bf16});
    launch.swiglu(SwigluArgs{b.gate_up, b.h, R, s.ff});
    launch.matmul(MatmulArgs{b.h, base + l.w_down, b.x, nullptr, R, ff, d, ff, d, d, true, s.bf16});
  }
  // The outputs' rows: hidden = rmsnorm(x, final_norm); logits = hidden @ head.
  if (b.n_outputs == 0) return;
  launch.rmsnorm(RmsNormArgs{b.x, b.outputs, base + w.final_norm, b.hidden, b.n_outputs, s.d, d, s.eps});
  if (b.logits)
    launch.matmul(MatmulArgs{b.hidden, base + w.head, b.logits, nullptr, b.n_outputs, d, s.vocab, d, s.vocab,
                             s.vocab, false, s.bf16});
}

}  // namespace lockstep::cuda
