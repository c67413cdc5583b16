// A model's description, as model.json records it: its dimensions and parameter registry, its
// precision, where its weights came from, and the arithmetic profile it was written for.
//
// The model is a Llama-style decoder over bytes (vocab 256 by default): token embedding, n_layers
// blocks of (RMSNorm, causal multi-head attention with interleaved-pair RoPE, residual; RMSNorm,
// SwiGLU MLP, residual), a final RMSNorm and an untied output head. Imported models may add
// biases to the attention's projections (qkv_bias, o_bias) and Llama 3's RoPE frequency scaling
// (rope_scaling); models without them have neither (docs/ARITHMETIC.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep {

// The most parameters a model may have, for every command and API that builds, loads or trains
// one: 2^31, 8 GiB as f32 (docs/LIMITS.md). ModelConfig::validate refuses more, saying how many
// bytes the configuration would need.
inline constexpr int64_t max_parameters = int64_t{1} << 31;
// The most token ids a model may have (vocab_size); a tokenizer.json id must be below it.
inline constexpr int32_t max_vocab_size = 1 << 20;

// The arithmetic profiles (docs/ARITHMETIC.md). Each model computes one, which model.json names
// (Model::profile()); a loader refuses one this build does not compute.
// profile_name(): "lockstep-f32-1", every model lockstep initialises, trains, exports or builds
// in memory, and every model.json of format_version 1.
const char* profile_name() noexcept;
// "lockstep-int8dot-1": matrices in GGUF's block formats (Q8_0, Q4_0, Q5_0), activations quantized
// per block of 32, integer block dot products; everything else as lockstep-f32-1.
const char* int8dot_profile_name() noexcept;
// "lockstep-int8dot-2": lockstep-int8dot-1, and Q4_K, Q5_K and Q6_K matrices computed in integers
// too (lockstep-int8dot-1 widens them to f32). A model with no K-quant matrix computes the same
// bits under both; import names -2 only for a file that has K-quants.
const char* int8dot_k_profile_name() noexcept;
// Whether `profile` computes matrices in GGUF blocks (one of the two int8dot profiles).
bool is_int8dot_profile(std::string_view profile) noexcept;
// The profile named `name` (one of the pointers above), or null for a name no profile has.
const char* find_profile(std::string_view name) noexcept;

enum class Precision {
  f32,   // every product in f32
  bf16,  // matmul operands rounded to bf16, products accumulated in f32
};
Precision parse_precision(std::string_view name);  // "f32" / "bf16"
const char* precision_name(Precision precision) noexcept;

// Where the weights came from, as model.json records it.
struct ModelSource {
  std::string directory;            // the model or step directory read ("" when built in memory)
  std::optional<int64_t> step;      // the training step of the checkpoint the weights come from
  std::optional<std::string> slug;  // the run's name
  std::optional<std::string> checkpoint;  // the step directory an exported model came from
  bool trained_weights = false;           // a checkpoint's trained weights rather than its EMA
};

// Llama 3's RoPE frequency scaling (Hugging Face's rope_scaling with rope_type "llama3"):
// docs/ARITHMETIC.md, "RoPE", gives the frequencies it defines.
struct RopeScaling {
  float factor = 8.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int32_t original_max_position = 8192;  // original_max_position_embeddings

  bool operator==(const RopeScaling&) const = default;
};

// The target id the training losses skip (allowed in the last column of ids [batch, length + 1]
// only; PyTorch's ignore_index).
inline constexpr int32_t ignored_target = -100;

struct ModelConfig {
  int32_t vocab_size = 256;  // token ids are in [0, vocab_size); 256 means the byte values
  int32_t length = 256;      // the window: most positions one row holds
  int32_t d_model = 128;
  int32_t n_layers = 4;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 4;  // grouped-query attention when < n_heads; must divide n_heads
  int32_t d_ff = 384;      // SwiGLU hidden width
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  int32_t batch = 8;  // rows of the training batch; loss_bits takes ids [batch, length + 1]
  // Biases added to q, k and v after their matmuls (Qwen2; Llama's attention_bias), and to the
  // attention's output projection (Llama's attention_bias). Absent from model.json when false.
  bool qkv_bias = false;
  bool o_bias = false;
  std::optional<RopeScaling> rope_scaling;  // absent: theta^(-2i/head_dim), unscaled

  int32_t head_dim() const { return d_model / n_heads; }
  int32_t q_dim() const { return n_heads * head_dim(); }
  int32_t kv_dim() const { return n_kv_heads * head_dim(); }

  // Throws Error(invalid_argument) naming the first field out of range, or, last, saying how
  // many parameters and bytes a configuration over max_parameters would need.
  void validate() const;

  // The flat parameter count (ParameterRegistry::total) computed from the dimensions alone,
  // without building the registry. Meaningful only for fields within validate()'s ranges, where
  // it cannot overflow (it stays below 2^47).
  int64_t parameter_count() const;

  bool operator==(const ModelConfig&) const = default;
};

// One named tensor of the flat parameter vector. Matrices are stored [in, out] ("in_out"): the
// output dimension is contiguous, so a SIMD lane holds one output column.
struct ParameterInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in floats, into the flat vector
  int64_t count = 0;   // product of shape
};

// Names, shapes and offsets of every parameter in one fixed order (docs/FORMAT.md):
//   embed [vocab, d_model]
//   per layer i: layers.i.attn_norm [d_model], layers.i.wq [d_model, q_dim],
//     layers.i.wk [d_model, kv_dim], layers.i.wv [d_model, kv_dim],
//     (qkv_bias only) layers.i.bq [q_dim], layers.i.bk [kv_dim], layers.i.bv [kv_dim],
//     layers.i.wo [q_dim, d_model], (o_bias only) layers.i.bo [d_model],
//     layers.i.mlp_norm [d_model], layers.i.w_gate [d_model, d_ff], layers.i.w_up [d_model, d_ff],
//     layers.i.w_down [d_ff, d_model]
//   final_norm [d_model], head [d_model, vocab]
class ParameterRegistry {
 public:
  explicit ParameterRegistry(const ModelConfig& config);

  const std::vector<ParameterInfo>& entries() const { return entries_; }
  int64_t total() const { return total_; }
  // Index of `name`, or -1.
  int64_t find(std::string_view name) const;
  const ParameterInfo& at(std::string_view name) const;  // throws Error when unknown

  // Offsets of the tensors the forward pass reads, resolved once.
  struct Layer {
    int64_t attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
    // -1 when the model has none; bq, bk, bv are consecutive ([bq | bk | bv] at bq).
    int64_t bq = -1, bk = -1, bv = -1, bo = -1;
  };
  int64_t embed() const { return embed_; }
  const Layer& layer(int32_t i) const { return layers_[static_cast<size_t>(i)]; }
  int64_t final_norm() const { return final_norm_; }
  int64_t head() const { return head_; }

 private:
  std::vector<ParameterInfo> entries_;
  std::vector<Layer> layers_;
  int64_t embed_ = 0, final_norm_ = 0, head_ = 0, total_ = 0;
};

// A named tensor, owning its floats; the dict form of the parameters.
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Flat vector <-> named tensors, both in registry order. `from_named` accepts the tensors in any
// order and refuses missing, unknown, duplicate or misshapen ones, naming them.
std::vector<NamedTensor> to_named(const ParameterRegistry& registry, std::span<const float> flat);
std::vector<float> from_named(const ParameterRegistry& registry,
                              std::span<const NamedTensor> tensors);

// Deterministic initialisation (docs/ARITHMETIC.md, "Initialisation"): counter-based RNG keyed by
// seed, tensor index and element index, so any one value can be regenerated alone.
std::vector<float> init_parameters(const ModelConfig& config, uint64_t seed);

}  // namespace lockstep
