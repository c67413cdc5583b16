// What the CUDA forward pass reads and writes, laid out once on the host for the GPU and for the
// host run of the same kernels (tests): the model's weights in one arena (the fused [wq | wk | wv]
// and [w_gate | w_up], which change no chain: docs/ARITHMETIC.md, "matmul"), and a batch of
// ragged rows flattened into consecutive positions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lockstep::cuda {

// The dimensions the kernels need (a ModelConfig's, and the precision).
struct ForwardShape {
  int32_t vocab = 0, d = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, ff = 0, length = 0;
  float eps = 0.0f, scale = 0.0f;  // scale: the attention's 1 / sqrt(head_dim), as the model holds it
  bool qkv_bias = false, o_bias = false;
  bool bf16 = false;  // matmul operands rounded to bf16 (B at layout, A as it enters)

  int64_t q_dim() const { return static_cast<int64_t>(n_heads) * head_dim; }
  int64_t kv_dim() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
  int64_t qkv_width() const { return q_dim() + 2 * kv_dim(); }
};

// Offsets (in floats) of one layer's tensors in the flat registry-order parameters; -1: absent.
struct LayerOffsets {
  int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  int64_t bq = -1, bk = -1, bv = -1, bo = -1;
};

// A model as the model layer hands it over: flat f32 parameters in registry order, the copy the
// matmuls read (the same, or rounded to bf16), the offsets, and the RoPE tables [length, hd/2].
struct ModelView {
  ForwardShape shape;
  const float* params = nullptr;
  const float* matmul_params = nullptr;
  int64_t embed = 0, final_norm = 0, head = 0;
  std::vector<LayerOffsets> layers;
  const float* rope_cos = nullptr;
  const float* rope_sin = nullptr;
};

// Offsets (in floats) of each tensor in the weight arena.
struct ArenaLayer {
  int64_t attn_norm, wqkv, bqkv, wo, bo, mlp_norm, w_gate_up, w_down;  // bqkv, bo: -1 when absent
};
struct WeightArena {
  std::vector<float> values;
  int64_t embed = 0, final_norm = 0, head = 0, rope_cos = 0, rope_sin = 0;
  std::vector<ArenaLayer> layers;
};

// The arena of `model`: every tensor the forward pass reads, matrices from matmul_params, the
// rest (embedding, norms, biases) from params.
WeightArena arrange_weights(const ModelView& model);

// One row of a call: positions [0, out_end) of `ids` are computed, outputs written for
// [out_begin, out_end) (as lockstep::RowRequest).
struct RowSpec {
  const int32_t* ids = nullptr;
  int32_t out_begin = 0, out_end = 0;
  float* logits = nullptr;  // [out_end - out_begin, vocab] or null
  float* hidden = nullptr;  // [out_end - out_begin, d] or null
};

// The rows flattened: position t of row i is flat row first[i] + t.
struct BatchLayout {
  std::vector<int32_t> ids, pos;  // [rows]
  std::vector<int32_t> outputs;   // [n_outputs]: the flat row of each output, row by row
  std::vector<int64_t> first;     // [n_rows]
  int64_t max_positions = 0;      // the longest row's positions
  bool any_logits = false, any_hidden = false;
  int64_t rows() const { return static_cast<int64_t>(ids.size()); }
  int64_t n_outputs() const { return static_cast<int64_t>(outputs.size()); }
};
BatchLayout arrange_batch(std::span<const RowSpec> rows);

// Copies output o's logits and hidden state (flat [n_outputs, vocab] and [n_outputs, d]) to the
// rows' buffers.
void scatter_outputs(std::span<const RowSpec> rows, const ForwardShape& shape, const float* logits,
                     const float* hidden);

}  // namespace lockstep::cuda
