// The reference forward pass: docs/ARITHMETIC.md, "The forward pass", line for line. One row at
// a time, one position at a time, scalar and single-threaded: the oracle every fast path, cache
// and device reproduces bit for bit.
#include <algorithm>
#include <vector>

#include "kernels/ref/blocks.hpp"
#include "kernels/ref/ops.hpp"
#include "model/model_impl.hpp"

namespace lockstep {
namespace {

// y [N] = x [K] @ w [K, N], under the model's precision or, for a matrix in blocks, its profile.
void linear(const Model::Impl& m, const float* x, int64_t w_offset, float* y, int64_t K, int64_t N) {
  if (m.blocks) {  // profile lockstep-int8dot-1: a matrix in GGUF blocks, from the file's rows
    const auto it = m.blocks->find(w_offset);
    if (it != m.blocks->end()) return ref::matmul_blocks(x, it->second.rows.data(), it->second.type, y, 1, K, N);
  }
  const float* w = m.matmul_weights() + w_offset;
  if (m.precision == Precision::bf16) {
    ref::matmul_bf16(x, w, y, 1, K, N);
  } else {
    ref::matmul(x, w, y, 1, K, N);
  }
}

void forward_row(const Model::Impl& m, const RowRequest& row) {
  const ModelConfig& c = m.config;
  const int64_t T = row.out_end;  // positions [0, T) are computed; none after the last output
  const int64_t d = c.d_model, hd = c.head_dim(), q_dim = c.q_dim(), kv_dim = c.kv_dim();
  const int64_t ff = c.d_ff, vocab = c.vocab_size, half = hd / 2;
  const int32_t group = c.n_heads / c.n_kv_heads;  // query heads per key/value head
  const float* p = m.full_parameters().data();

  std::vector<float> x(static_cast<size_t>(T * d));  // the residual stream [T, d]
  std::vector<float> xn(d), q(q_dim), att(q_dim), o(d), gate(ff), up(ff), h(ff), scores(T);
  std::vector<float> keys(static_cast<size_t>(T * kv_dim)), values(static_cast<size_t>(T * kv_dim));

  // x[t] = embed[ids[t]]
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(p + m.registry.embed() + static_cast<int64_t>(row.ids[t]) * d, d, x.data() + t * d);

  for (int32_t l = 0; l < c.n_layers; ++l) {
    const ParameterRegistry::Layer& w = m.registry.layer(l);
    for (int64_t t = 0; t < T; ++t) {
      float* xt = x.data() + t * d;
      const float* cos_row = m.rope_cos.data() + t * half;
      const float* sin_row = m.rope_sin.data() + t * half;
      float* kt = keys.data() + t * kv_dim;
      float* vt = values.data() + t * kv_dim;
      // Attention: xn = rmsnorm(x); q, k, v = xn @ wq, wk, wv; RoPE on q and k.
      ref::rmsnorm(xt, p + w.attn_norm, xn.data(), d, c.norm_eps);
      linear(m, xn.data(), w.wq, q.data(), d, q_dim);
      linear(m, xn.data(), w.wk, kt, d, kv_dim);
      linear(m, xn.data(), w.wv, vt, d, kv_dim);
      if (c.qkv_bias) {  // one f32 add per output, after its matmul chain, before RoPE
        for (int64_t i = 0; i < q_dim; ++i) q[i] = q[i] + p[w.bq + i];
        for (int64_t i = 0; i < kv_dim; ++i) kt[i] = kt[i] + p[w.bk + i];
        for (int64_t i = 0; i < kv_dim; ++i) vt[i] = vt[i] + p[w.bv + i];
      }
      ref::rope(q.data(), c.n_heads, static_cast<int32_t>(hd), cos_row, sin_row);
      ref::rope(kt, c.n_kv_heads, static_cast<int32_t>(hd), cos_row, sin_row);
      // Each head attends over positions [0, t]; head h reads key/value head h / group.
      for (int32_t head = 0; head < c.n_heads; ++head) {
        const int64_t kv_off = static_cast<int64_t>(head / group) * hd;
        ref::attention(q.data() + head * hd, keys.data() + kv_off, values.data() + kv_off, kv_dim,
                       t + 1, static_cast<int32_t>(hd), m.attention_scale, att.data() + head * hd,
                       scores.data());
      }
      // x = x + (att @ wo [+ bo])
      linear(m, att.data(), w.wo, o.data(), q_dim, d);
      if (c.o_bias)
        for (int64_t i = 0; i < d; ++i) o[i] = o[i] + p[w.bo + i];
      for (int64_t i = 0; i < d; ++i) xt[i] = xt[i] + o[i];
      // MLP: x = x + (silu(xn @ w_gate) * (xn @ w_up)) @ w_down, xn = rmsnorm(x)
      ref::rmsnorm(xt, p + w.mlp_norm, xn.data(), d, c.norm_eps);
      linear(m, xn.data(), w.w_gate, gate.data(), d, ff);
      linear(m, xn.data(), w.w_up, up.data(), d, ff);
      ref::swiglu(gate.data(), up.data(), h.data(), ff);
      linear(m, h.data(), w.w_down, o.data(), ff, d);
      for (int64_t i = 0; i < d; ++i) xt[i] = xt[i] + o[i];
    }
  }

  // Outputs at [out_begin, out_end): hidden = rmsnorm(x, final_norm); logits = hidden @ head.
  for (int64_t t = row.out_begin; t < T; ++t) {
    const int64_t r = t - row.out_begin;
    ref::rmsnorm(x.data() + t * d, p + m.registry.final_norm(), xn.data(), d, c.norm_eps);
    if (row.hidden) std::copy_n(xn.data(), d, row.hidden + r * d);
    if (row.logits) linear(m, xn.data(), m.registry.head(), row.logits + r * vocab, d, vocab);
  }
}

}  // namespace

void forward_reference(const Model::Impl& model, std::span<const RowRequest> rows) {
  for (const RowRequest& row : rows) forward_row(model, row);
}

}  // namespace lockstep
