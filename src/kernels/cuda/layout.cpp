#include "kernels/cuda/layout.hpp"

#include <algorithm>

namespace lockstep::cuda {
namespace {

// Appends `count` floats of `from` to the arena; returns where they start.
int64_t append(std::vector<float>& arena, const float* from, int64_t count) {
  const int64_t at = static_cast<int64_t>(arena.size());
  arena.insert(arena.end(), from, from + count);
  return at;
}

// Appends the matrices [K, widths...] side by side as one [K, sum of widths] (row k of the
// result is row k of each in turn).
int64_t append_fused(std::vector<float>& arena, const float* base, int64_t K,
                     std::initializer_list<std::pair<int64_t, int64_t>> parts) {
  const int64_t at = static_cast<int64_t>(arena.size());
  for (int64_t k = 0; k < K; ++k)
    for (const auto& [offset, width] : parts) arena.insert(arena.end(), base + offset + k * width, base + offset + (k + 1) * width);
  return at;
}

}  // namespace

WeightArena arrange_weights(const ModelView& m) {
  const ForwardShape& s = m.shape;
  const int64_t d = s.d, q = s.q_dim(), kv = s.kv_dim(), ff = s.ff, half = s.head_dim / 2;
  WeightArena w;
  w.embed = append(w.values, m.params + m.embed, static_cast<int64_t>(s.vocab) * d);
  for (const LayerOffsets& l : m.layers) {
    ArenaLayer a{};
    a.attn_norm = append(w.values, m.params + l.attn_norm, d);
    a.wqkv = append_fused(w.values, m.matmul_params, d, {{l.wq, q}, {l.wk, kv}, {l.wv, kv}});
    a.bqkv = -1;
    if (s.qkv_bias) {  // bq, bk, bv are consecutive in the registry
      a.bqkv = append(w.values, m.params + l.bq, q);
      append(w.values, m.params + l.bk, kv);
      append(w.values, m.params + l.bv, kv);
    }
    a.wo = append(w.values, m.matmul_params + l.wo, q * d);
    a.bo = s.o_bias ? append(w.values, m.params + l.bo, d) : -1;
    a.mlp_norm = append(w.values, m.params + l.mlp_norm, d);
    a.w_gate_up = append_fused(w.values, m.matmul_params, d, {{l.w_gate, ff}, {l.w_up, ff}});
    a.w_down = append(w.values, m.matmul_params + l.w_down, ff * d);
    w.layers.push_back(a);
  }
  w.final_norm = append(w.values, m.params + m.final_norm, d);
  w.head = append(w.values, m.matmul_params + m.head, d * s.vocab);
  w.rope_cos = append(w.values, m.rope_cos, static_cast<int64_t>(s.length) * half);
  w.rope_sin = append(w.values, m.rope_sin, static_cast<int64_t>(s.length) * half);
  return w;
}

BatchLayout arrange_batch(std::span<const RowSpec> rows) {
  BatchLayout b;
  for (const RowSpec& r : rows) {
    b.first.push_back(b.rows());
    for (int32_t t = 0; t < r.out_end; ++t) {
      b.ids.push_back(r.ids[t]);
      b.pos.push_back(t);
    }
    for (int32_t t = r.out_begin; t < r.out_end; ++t) b.outputs.push_back(static_cast<int32_t>(b.first.back() + t));
    b.max_positions = std::max<int64_t>(b.max_positions, r.out_end);
    b.any_logits = b.any_logits || r.logits;
    b.any_hidden = b.any_hidden || r.hidden;
  }
  return b;
}

void scatter_outputs(std::span<const RowSpec> rows, const ForwardShape& shape, const float* logits,
                     const float* hidden) {
  int64_t o = 0;
  for (const RowSpec& r : rows) {
    const int64_t n = r.out_end - r.out_begin;
    if (r.logits && logits) std::copy_n(logits + o * shape.vocab, n * shape.vocab, r.logits);
    if (r.hidden && hidden) std::copy_n(hidden + o * shape.d, n * shape.d, r.hidden);
    o += n;
  }
}

}  // namespace lockstep::cuda
