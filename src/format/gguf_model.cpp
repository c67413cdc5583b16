// GGUF `llama` files as lockstep models (gguf_model.hpp). The names and shapes, in ggml's order
// (ne[0] contiguous; a matrix holds one row of ne[0] inputs per output):
//   token_embd.weight {d, vocab}    -> embed [vocab, d], row t token t, as it is
//   blk.i.attn_norm.weight {d}      -> layers.i.attn_norm       (ffn_norm -> mlp_norm)
//   blk.i.attn_q.weight {d, q_dim}  -> layers.i.wq [d, q_dim]   (attn_k, attn_v, attn_output,
//                                      ffn_gate, ffn_up, ffn_down likewise), transposed
//   output_norm.weight {d}          -> final_norm
//   output.weight {d, vocab}        -> head [d, vocab]; absent: token_embd's rows (tied)
// llama.cpp's converter has already permuted the query and key rows into adjacent RoPE pairs,
// which is lockstep's layout (docs/FORMAT.md, "GGUF export", "RoPE"), so they are used as they are.
#include "format/gguf_model.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <cstring>

#include "core/half.hpp"
#include "core/host_math.hpp"
#include "core/pages.hpp"
#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/format_error.hpp"
#include "format/model_json.hpp"
#include "format/rope_pairs.hpp"
#include "lockstep/format.hpp"
#include "quant/k_quants.hpp"

namespace lockstep::format {
namespace {

const GgufValue& need_key(const GgufFile& f, const std::string& key, const std::string& what) {
  const GgufValue* v = f.find(key);
  if (!v) refuse(what, "has no key '" + key + "'");
  return *v;
}

int32_t int_key(const GgufFile& f, const std::string& key, const std::string& what, std::optional<int32_t> fallback = {}) {
  const GgufValue* v = f.find(key);
  if (!v) {
    if (fallback) return *fallback;
    refuse(what, "has no key '" + key + "'");
  }
  if (!v->is_integer() || v->i64 < 0 || v->i64 > INT32_MAX)
    refuse(what, "key '" + key + "' is not a non-negative integer within int32");
  return static_cast<int32_t>(v->i64);
}

float float_key(const GgufFile& f, const std::string& key, const std::string& what, float fallback) {
  const GgufValue* v = f.find(key);
  if (!v) return fallback;
  if (v->type != 6 && v->type != 12) refuse(what, "key '" + key + "' is not a float");
  return static_cast<float>(v->number);
}

// Tensor `name`'s values as f32, element i of its data in order (F32, F16, BF16; Q4_K, Q5_K and
// Q6_K super-blocks by quant/k_quants' rule), each finite.
std::vector<float> widen(const GgufTensor& t, const std::string& what) {
  uint64_t count = 1;
  for (uint64_t n : t.ne) count *= n;
  std::vector<float> out(static_cast<size_t>(count));
  if (const auto k = quant::k_quant_of(t.type)) {  // rows are whole super-blocks (the reader checked)
    const int64_t bytes = quant::super_block_bytes(*k);
    for (uint64_t b = 0; b < count / quant::kSuperBlockValues; ++b) {
      float* dst = out.data() + b * quant::kSuperBlockValues;
      quant::widen_super_block(*k, t.data + b * bytes, dst);
      for (int j = 0; j < quant::kSuperBlockValues; ++j)
        if (!std::isfinite(dst[j]))
          refuse(what, "tensor '" + t.name + "' super-block " + std::to_string(b) + " has a non-finite scale");
    }
    return out;
  }
  for (uint64_t i = 0; i < count; ++i) {
    float v;
    if (t.type == 0) {
      std::memcpy(&v, t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      v = t.type == 1 ? f32_from_f16_bits(h) : f32_from_bf16_bits(h);
    }
    if (!std::isfinite(v))
      refuse(what, "tensor '" + t.name + "' holds a non-finite value at element " + std::to_string(i));
    out[static_cast<size_t>(i)] = v;
  }
  return out;
}

// Llama 3's RoPE scaling (docs/ARITHMETIC.md, "Llama 3 RoPE scaling"), which llama.cpp's
// converter writes as no key but a tensor, `rope_freqs.weight` (llama3_rope_divisors). Every
// Llama 3.1, 3.2 and 3.3 has low 1, high 4 and L 8192, and a factor that is the divisors'
// largest; the divisors must be those (within 1e-4 of each, which the converter's f32 frequencies
// stay far inside), so that the model computes Llama 3's own scaling with lockstep's exact
// tables. All ones: no scaling.
std::optional<RopeScaling> llama3_scaling(const GgufTensor& t, const ModelConfig& c, const std::string& what) {
  const int64_t pairs = c.head_dim() / 2;
  if (t.ne.size() != 1 || t.ne[0] != static_cast<uint64_t>(pairs))
    refuse(what, "tensor 'rope_freqs.weight' is not a vector of " + std::to_string(pairs) +
                     " values (one per RoPE pair of the head dimension " + std::to_string(c.head_dim()) + ")");
  if (t.type != 0 && t.type != 1 && t.type != 30)  // widen reads these as floats, 4 or 2 bytes each
    refuse(what, "tensor 'rope_freqs.weight' is of type " + ggml_type_name(t.type) + "; lockstep reads it as F32, F16 or BF16");
  const std::vector<float> divisors = widen(t, what);
  const float factor = *std::max_element(divisors.begin(), divisors.end());
  if (factor == 1.0f && std::all_of(divisors.begin(), divisors.end(), [](float v) { return v == 1.0f; }))
    return std::nullopt;
  const RopeScaling scaling{factor, 1.0f, 4.0f, 8192};
  const std::vector<double> want = llama3_rope_divisors(scaling, c.head_dim(), c.rope_theta);
  for (int64_t i = 0; i < pairs; ++i) {
    const double w = want[static_cast<size_t>(i)];
    if (!(std::fabs(divisors[static_cast<size_t>(i)] - w) <= 1e-4 * w))
      refuse(what, "tensor 'rope_freqs.weight' is not Llama 3's RoPE scaling (factor " + std::to_string(factor) +
                       ", low 1, high 4, original context 8192): value " + std::to_string(i) + " is " +
                       std::to_string(divisors[static_cast<size_t>(i)]) + ", that scaling gives " + std::to_string(w));
  }
  return scaling;
}

}  // namespace

std::vector<double> llama3_rope_divisors(const RopeScaling& r, int32_t head_dim, float theta) {
  const double L = r.original_max_position, low = L / r.low_freq_factor, high = L / r.high_freq_factor;
  std::vector<double> out;
  for (int32_t i = 0; i < head_dim / 2; ++i) {
    const double freq = host_exp(-(2.0 * i / head_dim) * host_log(theta));
    const double wavelen = 2 * kHostPi / freq;
    double v = r.factor;
    if (wavelen < high) {
      v = 1;
    } else if (wavelen <= low) {
      const double smooth = (L / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
      v = 1 / ((1 - smooth) / r.factor + smooth);
    }
    out.push_back(v);
  }
  return out;
}

GgufModel read_gguf_llama(const GgufFile& f, const std::string& what, std::optional<int32_t> length,
                          std::shared_ptr<const void> owner, bool k_quant_blocks) {
  const GgufValue& arch = need_key(f, "general.architecture", what);
  if (arch.type != 8 || (arch.text != "llama" && arch.text != "qwen2"))
    refuse(what, "general.architecture is " + (arch.type == 8 ? "'" + arch.text + "'" : std::string("not a string")) +
                     "; lockstep imports 'llama' and 'qwen2'");
  // qwen2 is llama with biases on q, k and v, and its query and key rows in Hugging Face's order
  // (llama.cpp rotates them as NeoX pairs, i with i + head_dim / 2, where its llama converter
  // reorders them for adjacent pairs): the reader puts them in lockstep's adjacent pairs below.
  const bool qwen2 = arch.text == "qwen2";
  const std::string A = arch.text + ".";  // the keys' prefix
  GgufModel out;
  ModelConfig& c = out.config;
  c.qkv_bias = qwen2;
  c.d_model = int_key(f, A + "embedding_length", what);
  c.n_layers = int_key(f, A + "block_count", what);
  c.d_ff = int_key(f, A + "feed_forward_length", what);
  c.n_heads = int_key(f, A + "attention.head_count", what);
  c.n_kv_heads = int_key(f, A + "attention.head_count_kv", what, c.n_heads);
  c.norm_eps = float_key(f, A + "attention.layer_norm_rms_epsilon", what, 1e-5f);
  c.rope_theta = float_key(f, A + "rope.freq_base", what, 10000.0f);
  c.batch = 1;
  const int32_t context = int_key(f, A + "context_length", what);
  if (!length && context > 65536)
    refuse(what, A + "context_length " + std::to_string(context) + " is past lockstep's 65536; give --length");
  c.length = length ? *length : context;
  if (c.n_heads > 0 && c.d_model % c.n_heads == 0) {
    const int32_t rope_dims = int_key(f, A + "rope.dimension_count", what, c.d_model / c.n_heads);
    if (rope_dims != c.d_model / c.n_heads)
      refuse(what, A + "rope.dimension_count " + std::to_string(rope_dims) + " is not the head dimension " +
                       std::to_string(c.d_model / c.n_heads) + " (partial RoPE is not supported)");
  }
  if (const GgufValue* s = f.find(A + "rope.scaling.type"); s && !(s->type == 8 && s->text == "none"))
    refuse(what, A + "rope.scaling.type is set; lockstep imports GGUF files without RoPE scaling");
  if (const GgufValue* v = f.find(A + "expert_count"); v && v->i64 > 0)
    refuse(what, A + "expert_count is set: mixture-of-experts models are not supported");
  const GgufTensor* embd = nullptr;
  for (const GgufTensor& t : f.tensors)
    if (t.name == "token_embd.weight") embd = &t;
  if (!embd) refuse(what, "has no tensor 'token_embd.weight'");
  if (embd->ne.size() != 2) refuse(what, "tensor 'token_embd.weight' is not a matrix");
  c.vocab_size = int_key(f, A + "vocab_size", what, static_cast<int32_t>(std::min<uint64_t>(embd->ne[1], INT32_MAX)));
  if (c.n_heads > 0 && c.d_model % c.n_heads == 0 && c.head_dim() % 2 == 0)
    for (const GgufTensor& t : f.tensors)
      if (t.name == "rope_freqs.weight") c.rope_scaling = llama3_scaling(t, c, what);
  try {
    c.validate();
  } catch (const Error& e) {
    refuse(what, std::string("the configuration its keys give is not one lockstep runs: ") + e.what());
  }
  const ParameterRegistry reg(c);
  // The parameters grow target by target in registry order (reserved once, never moved): of a
  // matrix in blocks only the floats in the pages at its two ends are dequantized (parameters()
  // reads them there), and the whole pages between them are given back at once, so loading holds
  // one f32 matrix's zeros at a time beside the blocks, and the model the f32 values of its other
  // tensors (Model::Impl restores the given back pages from the blocks, on demand). Dequantizing
  // whole matrices only to give their pages back was 42% of loading an l768 Q8_0 file.

  // Each registry parameter and the GGUF tensor it comes from.
  struct Target {
    int64_t offset;
    std::vector<uint64_t> ne;  // expected, ggml order
    bool matrix, embedding;
    bool neox = false;  // qwen2's query and key rows (and biases): NeoX pairs, put in adjacent pairs
  };
  std::map<std::string, Target> targets;
  const uint64_t d = static_cast<uint64_t>(c.d_model), V = static_cast<uint64_t>(c.vocab_size);
  const uint64_t q = static_cast<uint64_t>(c.q_dim()), kv = static_cast<uint64_t>(c.kv_dim()), ff = static_cast<uint64_t>(c.d_ff);
  targets["token_embd.weight"] = {reg.embed(), {d, V}, true, true};
  targets["output_norm.weight"] = {reg.final_norm(), {d}, false, false};
  targets["output.weight"] = {reg.head(), {d, V}, true, false};
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const auto& L = reg.layer(l);
    const std::string b = "blk." + std::to_string(l) + ".";
    targets[b + "attn_norm.weight"] = {L.attn_norm, {d}, false, false};
    targets[b + "attn_q.weight"] = {L.wq, {d, q}, true, false, qwen2};
    targets[b + "attn_k.weight"] = {L.wk, {d, kv}, true, false, qwen2};
    if (qwen2) {
      targets[b + "attn_q.bias"] = {L.bq, {q}, false, false, true};
      targets[b + "attn_k.bias"] = {L.bk, {kv}, false, false, true};
      targets[b + "attn_v.bias"] = {L.bv, {kv}, false, false};
    }
    targets[b + "attn_v.weight"] = {L.wv, {d, kv}, true, false};
    targets[b + "attn_output.weight"] = {L.wo, {q, d}, true, false};
    targets[b + "ffn_norm.weight"] = {L.mlp_norm, {d}, false, false};
    targets[b + "ffn_gate.weight"] = {L.w_gate, {d, ff}, true, false};
    targets[b + "ffn_up.weight"] = {L.w_up, {d, ff}, true, false};
    targets[b + "ffn_down.weight"] = {L.w_down, {ff, d}, true, false};
  }
  auto shape_text = [](const std::vector<uint64_t>& ne) {
    std::string s = "{";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "}";
  };
  // The file's row (or bias element) of lockstep's output j.
  auto source_row = [&](const Target& to, int64_t j) { return to.neox ? neox_row(j, c.head_dim()) : j; };
  auto place = [&](const GgufTensor& t, const Target& to) {  // t's shape checked below, before it
    float* dst = out.parameters.data() + to.offset;
    const int64_t K = static_cast<int64_t>(t.ne[0]), N = to.matrix ? static_cast<int64_t>(t.ne[1]) : 1;
    if (const auto type = quant::block_type_of(t.type, k_quant_blocks)) {
      if (!to.matrix) refuse(what, "tensor '" + t.name + "' is a vector in " + ggml_type_name(t.type) + "; lockstep reads vectors as F32, F16 or BF16");
      std::vector<uint8_t> reordered;  // NeoX rows in adjacent pairs: a copy, the blocks unchanged
      if (to.neox) {
        const size_t row = static_cast<size_t>(t.bytes) / static_cast<size_t>(N);
        reordered.resize(static_cast<size_t>(t.bytes));
        for (int64_t n = 0; n < N; ++n)
          std::memcpy(reordered.data() + static_cast<size_t>(n) * row, t.data + static_cast<size_t>(source_row(to, n)) * row, row);
      }
      quant::BlockRows rows =
          to.neox ? quant::block_rows(*type, K, N, reordered, nullptr)
                  : quant::block_rows(*type, K, N, {t.data, static_cast<size_t>(t.bytes)}, owner);
      const int64_t units = K / quant::row_multiple(*type), row_bytes = quant::block_row_bytes(*type, K);
      const char* unit = quant::is_k_quant(*type) ? "super-block " : "block ";
      for (int64_t n = 0; n < N; ++n)
        for (int64_t u = 0; u < units; ++u)
          if (!quant::unit_scales_finite(*type, rows.rows.data() + n * row_bytes, u))
            refuse(what, "tensor '" + t.name + "' " + unit + std::to_string(n * units + u) + " has a non-finite scale");
      if (to.embedding) {  // the lookup reads its f32 rows
        quant::dequantize_rows(rows, dst, false);
      } else {  // only the floats of the pages at its two ends stay: the whole pages between go back
        const int64_t count = K * N;
        auto [first, last] = whole_float_pages(out.parameters.data(), to.offset, count);
        if (first >= last) first = last = to.offset + count;  // no whole page: all of it stays
        quant::dequantize_range(rows, dst, true, 0, first - to.offset);
        quant::dequantize_range(rows, dst, true, last - to.offset, count);
        const auto released = release_float_pages(out.parameters.data(), to.offset, count);
        if (released.first >= released.second)  // kept after all (madvise refused): fill it too
          quant::dequantize_range(rows, dst, true, first - to.offset, last - to.offset);
      }
      out.blocks.emplace(to.offset, std::move(rows));
      return;
    }
    const std::vector<float> v = widen(t, what);
    if (to.embedding) {
      std::copy(v.begin(), v.end(), dst);
    } else if (!to.matrix) {
      for (int64_t j = 0; j < K; ++j) dst[j] = v[static_cast<size_t>(source_row(to, j))];
    } else {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) dst[k * N + n] = v[static_cast<size_t>(source_row(to, n) * K + k)];
    }
  };
  std::map<std::string, const GgufTensor*> source;  // each target's tensor
  for (const GgufTensor& t : f.tensors) {
    if (t.name == "rope_freqs.weight") continue;  // read above, as the configuration's rope_scaling
    if (!targets.count(t.name)) refuse(what, "tensor '" + t.name + "' is not one of a llama model lockstep imports");
    source[t.name] = &t;
  }
  std::vector<std::pair<std::string, Target>> in_order(targets.begin(), targets.end());
  std::sort(in_order.begin(), in_order.end(), [](const auto& a, const auto& b) { return a.second.offset < b.second.offset; });
  // Tied (no output.weight): the head is the embedding's rows, one row per output already.
  auto tensor_of = [&](const std::string& name) -> const GgufTensor& {
    const auto it = source.find(name);
    if (it == source.end() && name != "output.weight") refuse(what, "has no tensor '" + name + "'");
    return it == source.end() ? *embd : *it->second;
  };
  // Every tensor there in the shape its keys give before anything is reserved: the file's bytes
  // then bound the parameters (its keys alone could ask for gigabytes: the fuzzer found one).
  for (const auto& [name, to] : in_order) {
    const GgufTensor& t = tensor_of(name);
    if (t.ne != to.ne)
      refuse(what, "tensor '" + t.name + "' has ne " + shape_text(t.ne) + ", expected " + shape_text(to.ne) +
                       " for the configuration its keys give");
  }
  out.parameters.reserve(static_cast<size_t>(reg.total()));
  for (const auto& [name, to] : in_order) {
    const GgufTensor& t = tensor_of(name);
    const int64_t count = static_cast<int64_t>(to.ne[0]) * (to.ne.size() > 1 ? static_cast<int64_t>(to.ne[1]) : 1);
    out.parameters.resize(static_cast<size_t>(to.offset + count), 0.0f);
    place(t, to);
  }
  out.parameters.resize(static_cast<size_t>(reg.total()), 0.0f);
  if (const GgufValue* m = f.find("tokenizer.ggml.model"); m && m->type == 8) out.vocabulary = m->text;
  if (const GgufValue* e = f.find("tokenizer.ggml.eos_token_id"); e && e->is_integer() && e->i64 >= 0 && e->i64 < c.vocab_size)
    out.eos_token_ids.push_back(static_cast<int32_t>(e->i64));
  return out;
}

void write_gguf_model_directory(const std::string& dir, const ModelConfig& config, std::span<const uint8_t> gguf,
                                const std::vector<int32_t>& eos_token_ids, const char* profile) {
  config.validate();
  if (path_exists(dir)) throw Error(ErrorKind::invalid_argument, "'" + dir + "' already exists; lockstep will not overwrite it");
  AtomicDirectory out(dir);
  write_file_synced(out.file(kGgufWeightsFile), std::string_view(reinterpret_cast<const char*>(gguf.data()), gguf.size()));
  ModelDescription d;
  d.config = config;
  d.profile = profile;
  d.weights = {kGgufWeightsFile, kGgufFormat, sha256_hex(gguf.data(), gguf.size())};
  d.eos_token_ids = eos_token_ids;
  write_file_synced(out.file("model.json"), render_model_json(d));
  out.commit();
}

}  // namespace lockstep::format
