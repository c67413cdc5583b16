#include <cmath>
#include <unordered_map>

#include "core/host_math.hpp"
#include "core/rng.hpp"
#include "lockstep/config.hpp"
#include "lockstep/error.hpp"

namespace lockstep {
namespace {

// Upper bounds that keep every product of dimensions far inside int64 and every allocation sane.
constexpr int32_t kMaxLength = 1 << 16;
constexpr int32_t kMaxWidth = 1 << 16;
constexpr int32_t kMaxLayers = 1024;
constexpr int32_t kMaxBatch = 1 << 16;

void require(bool ok, const std::string& message) {
  if (!ok) throw Error(ErrorKind::invalid_argument, "model config: " + message);
}

std::string range(const char* name, int64_t value, int64_t lo, int64_t hi) {
  return std::string(name) + " = " + std::to_string(value) + " is outside [" + std::to_string(lo) +
         ", " + std::to_string(hi) + "]";
}

}  // namespace

void ModelConfig::validate() const {
  require(vocab_size >= 1 && vocab_size <= max_vocab_size, range("vocab_size", vocab_size, 1, max_vocab_size));
  require(length >= 1 && length <= kMaxLength, range("length", length, 1, kMaxLength));
  require(d_model >= 2 && d_model <= kMaxWidth, range("d_model", d_model, 2, kMaxWidth));
  require(n_layers >= 1 && n_layers <= kMaxLayers, range("n_layers", n_layers, 1, kMaxLayers));
  require(n_heads >= 1 && n_heads <= d_model, range("n_heads", n_heads, 1, d_model));
  require(d_model % n_heads == 0, "d_model = " + std::to_string(d_model) +
                                      " is not a multiple of n_heads = " + std::to_string(n_heads));
  require(head_dim() % 2 == 0, "head_dim = d_model / n_heads = " + std::to_string(head_dim()) +
                                   " must be even (RoPE rotates pairs)");
  require(n_kv_heads >= 1 && n_kv_heads <= n_heads, range("n_kv_heads", n_kv_heads, 1, n_heads));
  require(n_heads % n_kv_heads == 0, "n_heads = " + std::to_string(n_heads) +
                                         " is not a multiple of n_kv_heads = " +
                                         std::to_string(n_kv_heads));
  require(d_ff >= 1 && d_ff <= 4 * kMaxWidth, range("d_ff", d_ff, 1, 4 * kMaxWidth));
  require(std::isfinite(norm_eps) && norm_eps > 0.0f, "norm_eps must be a positive finite number");
  require(std::isfinite(rope_theta) && rope_theta > 1.0f, "rope_theta must be a finite number > 1");
  require(batch >= 1 && batch <= kMaxBatch, range("batch", batch, 1, kMaxBatch));
  if (rope_scaling) {
    const RopeScaling& s = *rope_scaling;
    require(std::isfinite(s.factor) && s.factor >= 1.0f, "rope_scaling.factor must be a finite number >= 1");
    require(std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0.0f,
            "rope_scaling.low_freq_factor must be a positive finite number");
    require(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor,
            "rope_scaling.high_freq_factor must be a finite number > low_freq_factor");
    require(s.original_max_position >= 1 && s.original_max_position <= (1 << 24),
            range("rope_scaling.original_max_position_embeddings", s.original_max_position, 1, 1 << 24));
  }
  // Last, so that every dimension is in range and the count cannot overflow.
  const int64_t count = parameter_count();
  require(count <= max_parameters,
          "the model has " + std::to_string(count) + " parameters, which need " +
              std::to_string(count * 4) + " bytes as f32, more than the " +
              std::to_string(max_parameters) + " parameters (" + std::to_string(max_parameters * 4) +
              " bytes) lockstep builds, loads or trains");
}

int64_t ModelConfig::parameter_count() const {
  // The registry's tensors (config.hpp): embed and head [vocab, d_model] each, final_norm, and
  // per layer two norms, wq, wk, wv, wo and the three MLP matrices.
  const int64_t d = d_model, ff = d_ff, q = q_dim(), kv = kv_dim(), v = vocab_size;
  const int64_t per_layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * ff +
                            (qkv_bias ? q + 2 * kv : 0) + (o_bias ? d : 0);
  return 2 * v * d + d + int64_t{n_layers} * per_layer;
}

ParameterRegistry::ParameterRegistry(const ModelConfig& c) {
  c.validate();
  auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    entries_.push_back({std::move(name), std::move(shape), total_, count});
    total_ += count;
    return entries_.back().offset;
  };
  const int64_t d = c.d_model, ff = c.d_ff, q = c.q_dim(), kv = c.kv_dim(), v = c.vocab_size;
  embed_ = add("embed", {v, d});
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = add(p + "attn_norm", {d});
    l.wq = add(p + "wq", {d, q});
    l.wk = add(p + "wk", {d, kv});
    l.wv = add(p + "wv", {d, kv});
    if (c.qkv_bias) {
      l.bq = add(p + "bq", {q});
      l.bk = add(p + "bk", {kv});
      l.bv = add(p + "bv", {kv});
    }
    l.wo = add(p + "wo", {q, d});
    if (c.o_bias) l.bo = add(p + "bo", {d});
    l.mlp_norm = add(p + "mlp_norm", {d});
    l.w_gate = add(p + "w_gate", {d, ff});
    l.w_up = add(p + "w_up", {d, ff});
    l.w_down = add(p + "w_down", {ff, d});
    layers_.push_back(l);
  }
  final_norm_ = add("final_norm", {d});
  head_ = add("head", {d, v});
  if (total_ != c.parameter_count())
    throw Error(ErrorKind::internal, "ModelConfig::parameter_count disagrees with the registry");
}

int64_t ParameterRegistry::find(std::string_view name) const {
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

const ParameterInfo& ParameterRegistry::at(std::string_view name) const {
  const int64_t i = find(name);
  if (i < 0) throw Error(ErrorKind::invalid_argument, "no parameter named '" + std::string(name) + "'");
  return entries_[static_cast<size_t>(i)];
}

std::vector<NamedTensor> to_named(const ParameterRegistry& registry, std::span<const float> flat) {
  if (static_cast<int64_t>(flat.size()) != registry.total())
    throw Error(ErrorKind::invalid_argument, "parameters must hold " +
                                                 std::to_string(registry.total()) +
                                                 " float32 values, got " + std::to_string(flat.size()));
  std::vector<NamedTensor> out;
  out.reserve(registry.entries().size());
  for (const auto& e : registry.entries()) {
    const float* p = flat.data() + e.offset;
    out.push_back({e.name, e.shape, std::vector<float>(p, p + e.count)});
  }
  return out;
}

std::vector<float> from_named(const ParameterRegistry& registry,
                              std::span<const NamedTensor> tensors) {
  std::unordered_map<std::string, const NamedTensor*> by_name;
  std::vector<std::string> unknown;
  for (const auto& t : tensors) {
    if (registry.find(t.name) < 0) {
      unknown.push_back(t.name);
      continue;
    }
    if (!by_name.emplace(t.name, &t).second)
      throw Error(ErrorKind::invalid_argument, "parameter '" + t.name + "' is given twice");
  }
  std::vector<std::string> missing;
  for (const auto& e : registry.entries())
    if (!by_name.count(e.name)) missing.push_back(e.name);
  if (!missing.empty() || !unknown.empty()) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", '" : "'") + v[i] + "'";
      return s + "]";
    };
    throw Error(ErrorKind::invalid_argument, "parameter dict mismatch; missing " + join(missing) +
                                                 ", unknown " + join(unknown));
  }
  std::vector<float> flat(static_cast<size_t>(registry.total()));
  for (const auto& e : registry.entries()) {
    const NamedTensor& t = *by_name.at(e.name);
    if (t.shape != e.shape || static_cast<int64_t>(t.values.size()) != e.count) {
      std::string got = "[", want = "[";
      for (size_t i = 0; i < t.shape.size(); ++i) got += (i ? ", " : "") + std::to_string(t.shape[i]);
      for (size_t i = 0; i < e.shape.size(); ++i) want += (i ? ", " : "") + std::to_string(e.shape[i]);
      throw Error(ErrorKind::invalid_argument,
                  "parameter '" + e.name + "' has shape " + got + "], want " + want + "]");
    }
    std::copy(t.values.begin(), t.values.end(), flat.begin() + e.offset);
  }
  return flat;
}

std::vector<float> init_parameters(const ModelConfig& config, uint64_t seed) {
  const ParameterRegistry registry(config);
  std::vector<float> flat(static_cast<size_t>(registry.total()));
  // Normal(0, 0.02) for every matrix and the embedding; the two projections that write into the
  // residual stream (wo, w_down) scaled by 1/sqrt(2 n_layers); norm weights 1.
  const double base = 0.02;
  const double residual = base / host_sqrt(2.0 * config.n_layers);
  for (size_t t = 0; t < registry.entries().size(); ++t) {
    const ParameterInfo& e = registry.entries()[t];
    float* p = flat.data() + e.offset;
    if (e.shape.size() == 1) {  // norm weights 1, biases 0
      const bool bias = e.name.ends_with(".bq") || e.name.ends_with(".bk") ||
                        e.name.ends_with(".bv") || e.name.ends_with(".bo");
      for (int64_t i = 0; i < e.count; ++i) p[i] = bias ? 0.0f : 1.0f;
      continue;
    }
    const bool to_residual = e.name.ends_with(".wo") || e.name.ends_with(".w_down");
    const double std_dev = to_residual ? residual : base;
    for (int64_t i = 0; i < e.count; ++i)
      p[i] = static_cast<float>(std_dev * random_normal(seed, t, static_cast<uint64_t>(i)));
  }
  return flat;
}

// The names model.json records: the arithmetic profile and the precisions.

const char* profile_name() noexcept { return "lockstep-f32-1"; }
const char* int8dot_profile_name() noexcept { return "lockstep-int8dot-1"; }
const char* int8dot_k_profile_name() noexcept { return "lockstep-int8dot-2"; }

bool is_int8dot_profile(std::string_view profile) noexcept {
  return profile == int8dot_profile_name() || profile == int8dot_k_profile_name();
}

const char* find_profile(std::string_view name) noexcept {
  for (const char* p : {profile_name(), int8dot_profile_name(), int8dot_k_profile_name()})
    if (name == p) return p;
  return nullptr;
}

Precision parse_precision(std::string_view name) {
  if (name == "f32") return Precision::f32;
  if (name == "bf16") return Precision::bf16;
  throw Error(ErrorKind::invalid_argument,
              "unknown precision '" + std::string(name) + "'; expected f32 or bf16");
}

const char* precision_name(Precision precision) noexcept {
  return precision == Precision::bf16 ? "bf16" : "f32";
}

}  // namespace lockstep
