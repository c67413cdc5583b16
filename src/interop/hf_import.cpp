// import_hf: a Hugging Face LlamaForCausalLM or Qwen2ForCausalLM directory as a lockstep model directory
// (docs/FORMAT.md, "Hugging Face import").
//
// Hugging Face stores each linear layer as nn.Linear's weight [out, in]; lockstep stores [in, out]
// (the transpose). Hugging Face's RoPE (rotate_half) pairs element i of a head with element
// i + head_dim/2; lockstep pairs 2i with 2i + 1, with the same frequency theta^(-2i/head_dim) for
// pair i. Moving the query and key projections' output rows so that HF row h*hd + e*hd/2 + i
// becomes lockstep column h*hd + 2i + e (e in {0, 1}) makes lockstep's rotation the same rotation
// of the same pairs; q.k is unchanged since queries and keys are moved alike. The q and k biases
// (Qwen2) are moved as their rows.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <sys/stat.h>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "format/half.hpp"
#include "format/mapped_file.hpp"
#include "format/rope_pairs.hpp"
#include "format/safetensors.hpp"
#include "interop/hf_chat_template.hpp"
#include "interop/hf_eos.hpp"
#include "interop/json_file.hpp"
#include "interop/model_files.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/interop.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep {
namespace {

using nlohmann::json;

bool is_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::unsupported, where + ": " + what);
}

// One tensor as f32, widened exactly from F32, F16 or BF16.
struct Source {
  std::string file;
  format::TensorEntry entry;
  const uint8_t* data = nullptr;
};

class HfCheckpoint {
 public:
  explicit HfCheckpoint(const std::string& dir) {
    const std::string single = dir + "/model.safetensors";
    const std::string index = dir + "/model.safetensors.index.json";
    std::vector<std::string> files;
    if (is_file(index)) {
      json j = interop::read_json_file(index, size_t{64} << 20);
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        throw Error(ErrorKind::format, index + ": has no weight_map object");
      std::set<std::string> names;
      for (const auto& [tensor, file] : j["weight_map"].items()) {
        if (!file.is_string()) throw Error(ErrorKind::format, index + ": weight_map['" + tensor + "'] is not a string");
        const std::string f = file.get<std::string>();
        if (f.empty() || f.find('/') != std::string::npos || f[0] == '.')
          throw Error(ErrorKind::format, index + ": weight_map['" + tensor + "'] names '" + f + "', not a file in the directory");
        names.insert(f);
      }
      files.assign(names.begin(), names.end());
    } else if (is_file(single)) {
      files.push_back("model.safetensors");
    } else {
      throw Error(ErrorKind::io, dir + ": has neither model.safetensors nor model.safetensors.index.json");
    }
    for (const std::string& f : files) {
      const std::string path = dir + "/" + f;
      maps_.push_back(std::make_unique<format::MappedFile>(path));
      const format::SafetensorsHeader header = format::parse_safetensors(maps_.back()->bytes(), path);
      for (const format::TensorEntry& e : header.tensors) {
        if (tensors_.count(e.name)) throw Error(ErrorKind::format, path + ": tensor '" + e.name + "' is also in " + tensors_[e.name].file);
        tensors_[e.name] = {path, e, maps_.back()->bytes().data() + header.data_offset + e.begin};
      }
      files_.push_back(path);
    }
  }

  const std::vector<std::string>& files() const { return files_; }
  const std::map<std::string, Source>& tensors() const { return tensors_; }

  // The tensor `name` of `shape` as f32, row-major.
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape, std::set<std::string>& dtypes) {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw Error(ErrorKind::format, "the checkpoint has no tensor '" + name + "'");
    const Source& s = it->second;
    if (s.entry.shape != shape) {
      std::string got, want;
      for (int64_t n : s.entry.shape) got += (got.empty() ? "" : ", ") + std::to_string(n);
      for (int64_t n : shape) want += (want.empty() ? "" : ", ") + std::to_string(n);
      throw Error(ErrorKind::format, s.file + ": tensor '" + name + "' has shape [" + got + "], expected [" + want + "]");
    }
    size_t count = 1;
    for (int64_t n : shape) count *= static_cast<size_t>(n);
    std::vector<float> out(count);
    switch (s.entry.dtype) {
      case format::DType::f32:
        std::memcpy(out.data(), s.data, count * 4);
        break;
      case format::DType::f16:
      case format::DType::bf16:
        for (size_t i = 0; i < count; ++i) {
          uint16_t h;
          std::memcpy(&h, s.data + 2 * i, 2);
          out[i] = s.entry.dtype == format::DType::f16 ? format::f32_from_f16_bits(h) : format::f32_from_bf16_bits(h);
        }
        break;
      default:
        throw Error(ErrorKind::unsupported, s.file + ": tensor '" + name + "' is " + format::dtype_name(s.entry.dtype) +
                                                "; lockstep imports F32, F16 and BF16");
    }
    for (size_t i = 0; i < count; ++i)
      if (!std::isfinite(out[i]))
        throw Error(ErrorKind::format, s.file + ": tensor '" + name + "' holds a non-finite value at element " + std::to_string(i));
    dtypes.insert(format::dtype_name(s.entry.dtype));
    used_.insert(name);
    return out;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
  std::vector<std::unique_ptr<format::MappedFile>> maps_;
  std::vector<std::string> files_;
  std::map<std::string, Source> tensors_;
  std::set<std::string> used_;
};

int32_t int_field(const json& j, const std::string& where, const char* key, std::optional<int64_t> fallback = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return static_cast<int32_t>(*fallback);
    throw Error(ErrorKind::format, where + ": has no '" + key + "'");
  }
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < 1 || j[key].get<int64_t>() > INT32_MAX)
    throw Error(ErrorKind::format, where + ": '" + key + "' is not a positive integer");
  return static_cast<int32_t>(j[key].get<int64_t>());
}

double number_field(const json& j, const std::string& where, const char* key, std::optional<double> fallback = {}) {
  if (!j.contains(key) || j[key].is_null()) {
    if (fallback) return *fallback;
    throw Error(ErrorKind::format, where + ": has no '" + key + "'");
  }
  if (!j[key].is_number()) throw Error(ErrorKind::format, where + ": '" + key + "' is not a number");
  return j[key].get<double>();
}

}  // namespace

ImportHfResult import_hf(const std::string& dir_in, const std::string& out, const ImportHfOptions& options) {
  std::string dir = dir_in;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!format::is_directory(dir)) throw Error(ErrorKind::io, dir + ": is not a directory");
  const std::string where = dir + "/config.json";
  json cfg = interop::read_json_file(where, size_t{16} << 20);
  if (!cfg.is_object()) throw Error(ErrorKind::format, where + ": is not a JSON object");

  // What the architecture is, and what lockstep's Llama lacks, each refused by its field.
  // Qwen2 is Llama with biases on q, k and v (always) and an optional sliding window.
  bool qwen2 = false;
  if (cfg.contains("architectures")) {
    const json& a = cfg["architectures"];
    const bool llama = a.is_array() && std::find(a.begin(), a.end(), json("LlamaForCausalLM")) != a.end();
    qwen2 = a.is_array() && std::find(a.begin(), a.end(), json("Qwen2ForCausalLM")) != a.end();
    if (!llama && !qwen2)
      refuse(where, "'architectures' is " + a.dump() + "; lockstep imports LlamaForCausalLM and Qwen2ForCausalLM");
  }
  if (cfg.contains("model_type")) {
    const json& t = cfg["model_type"];
    if (t != "llama" && t != "qwen2") refuse(where, "'model_type' is " + t.dump() + "; lockstep imports \"llama\" and \"qwen2\"");
    if ((t == "qwen2") != qwen2 && cfg.contains("architectures"))
      refuse(where, "'model_type' is " + t.dump() + " but 'architectures' is " + cfg["architectures"].dump());
    qwen2 = t == "qwen2";
  }
  for (const char* act : {"hidden_act", "hidden_activation"})
    if (cfg.contains(act) && !cfg[act].is_null() && cfg[act] != "silu")
      refuse(where, std::string("'") + act + "' is " + cfg[act].dump() + "; lockstep's MLP is SwiGLU (silu)");
  if (cfg.contains("mlp_bias") && cfg["mlp_bias"] == true) refuse(where, "'mlp_bias' is true; lockstep's MLP has no biases");
  // Llama's attention_bias puts biases on q, k, v and o; Qwen2's attention has them on q, k and v.
  const bool attention_bias = !qwen2 && cfg.contains("attention_bias") && cfg["attention_bias"] == true;
  if (cfg.contains("attention_bias") && !cfg["attention_bias"].is_null() && !cfg["attention_bias"].is_boolean())
    throw Error(ErrorKind::format, where + ": 'attention_bias' is not a boolean");
  std::optional<RopeScaling> rope_scaling;
  if (cfg.contains("rope_scaling") && !cfg["rope_scaling"].is_null()) {
    const json& r = cfg["rope_scaling"];
    const char* type_key = r.is_object() && r.contains("rope_type") ? "rope_type" : "type";
    if (!r.is_object() || !r.contains(type_key) || r[type_key] != "llama3")
      refuse(where, "'rope_scaling' is " + r.dump() + "; lockstep's RoPE scaling is rope_type \"llama3\" alone");
    const std::string w = where + ": 'rope_scaling'";
    RopeScaling sc;
    sc.factor = static_cast<float>(number_field(r, w, "factor"));
    sc.low_freq_factor = static_cast<float>(number_field(r, w, "low_freq_factor"));
    sc.high_freq_factor = static_cast<float>(number_field(r, w, "high_freq_factor"));
    sc.original_max_position = int_field(r, w, "original_max_position_embeddings");
    for (const auto& [key, value] : r.items())
      if (key != "rope_type" && key != "type" && key != "factor" && key != "low_freq_factor" &&
          key != "high_freq_factor" && key != "original_max_position_embeddings")
        refuse(where, "'rope_scaling' has '" + key + "', which llama3 scaling does not define");
    rope_scaling = sc;
  }
  // Qwen2 writes sliding_window whether or not it uses it: it is ignored when use_sliding_window
  // is false (Qwen2's default); anywhere else a sliding window is refused.
  const bool window_off = cfg.contains("use_sliding_window") ? cfg["use_sliding_window"] == false : qwen2;
  if (cfg.contains("use_sliding_window") && cfg["use_sliding_window"] == true)
    refuse(where, "'use_sliding_window' is true; lockstep's attention sees the whole window");
  if (cfg.contains("sliding_window") && !cfg["sliding_window"].is_null() && !window_off)
    refuse(where, "'sliding_window' is " + cfg["sliding_window"].dump() + "; lockstep's attention sees the whole window");
  // The tokenizer: a SentencePiece tokenizer.model (Llama 1 and 2) where there is one, else a
  // tokenizer.json (byte-level BPE: Llama 3, SmolLM2, Qwen2). Read before any weight, so that a
  // bad one is refused (naming the file and the key) before anything is converted or written.
  const std::string spm = dir + "/tokenizer.model", hf_json = dir + "/tokenizer.json";
  std::unique_ptr<Tokenizer> tokenizer;
  std::string tokenizer_name;
  if (!options.ids_only && is_file(spm)) {
    tokenizer = Tokenizer::sentencepiece(spm);
    tokenizer_name = "tokenizer.model";
  } else if (!options.ids_only && is_file(hf_json)) {
    tokenizer = Tokenizer::hf_json(hf_json);
    tokenizer_name = "tokenizer.json";
  }
  // Its chat template (tokenizer_config.json's), kept beside it: checked here too, so that one
  // the interpreter cannot run is refused, naming the construct, before anything is written.
  const std::string chat_template = tokenizer ? interop::hf_chat_template_file(dir) : std::string();

  ModelConfig c;
  c.d_model = int_field(cfg, where, "hidden_size");
  c.d_ff = int_field(cfg, where, "intermediate_size");
  c.n_heads = int_field(cfg, where, "num_attention_heads");
  c.n_kv_heads = int_field(cfg, where, "num_key_value_heads", c.n_heads);
  c.n_layers = int_field(cfg, where, "num_hidden_layers");
  c.vocab_size = int_field(cfg, where, "vocab_size");
  c.norm_eps = static_cast<float>(number_field(cfg, where, "rms_norm_eps", 1e-6));
  c.rope_theta = static_cast<float>(number_field(cfg, where, "rope_theta", 10000.0));
  if (cfg.contains("head_dim") && !cfg["head_dim"].is_null() &&
      (c.d_model % c.n_heads != 0 || cfg["head_dim"] != c.d_model / c.n_heads))
    refuse(where, "'head_dim' is " + cfg["head_dim"].dump() + ", not hidden_size / num_attention_heads; lockstep's heads split d_model");
  const int32_t max_positions = int_field(cfg, where, "max_position_embeddings", 2048);
  if (options.length > 0) {
    c.length = options.length;
  } else if (max_positions > 65536) {
    refuse(where, "'max_position_embeddings' is " + std::to_string(max_positions) +
                      ", past lockstep's window of at most 65,536; --length sets a smaller window");
  } else {
    c.length = max_positions;
  }
  c.batch = options.batch;
  c.qkv_bias = qwen2 || attention_bias;
  c.o_bias = attention_bias;
  c.rope_scaling = rope_scaling;
  bool tied = false;
  if (cfg.contains("tie_word_embeddings")) {
    if (!cfg["tie_word_embeddings"].is_boolean()) throw Error(ErrorKind::format, where + ": 'tie_word_embeddings' is not a boolean");
    tied = cfg["tie_word_embeddings"].get<bool>();
  }
  c.validate();

  HfCheckpoint ckpt(dir);

  const ParameterRegistry reg(c);
  std::vector<float> params(static_cast<size_t>(reg.total()));
  std::set<std::string> dtypes;
  const int64_t d = c.d_model, hd = c.head_dim();
  // A lockstep matrix [in, out] at `offset` from HF's [out, in]: lockstep column j is HF row
  // src(j), which is j except for the RoPE permutation of queries and keys.
  auto linear = [&](const std::string& name, int64_t offset, int64_t in, int64_t out_dim, bool rope) {
    const std::vector<float> w = ckpt.read(name, {out_dim, in}, dtypes);
    for (int64_t j = 0; j < out_dim; ++j) {
      const int64_t src = rope ? format::neox_row(j, hd) : j;
      for (int64_t k = 0; k < in; ++k) params[static_cast<size_t>(offset + k * out_dim + j)] = w[static_cast<size_t>(src * in + k)];
    }
  };
  // A bias [out]: lockstep element j is HF element src(j), as for the matrix's columns.
  auto bias = [&](const std::string& name, int64_t offset, int64_t out_dim, bool rope) {
    const std::vector<float> b = ckpt.read(name, {out_dim}, dtypes);
    for (int64_t j = 0; j < out_dim; ++j)
      params[static_cast<size_t>(offset + j)] = b[static_cast<size_t>(rope ? format::neox_row(j, hd) : j)];
  };
  auto copy = [&](const std::string& name, int64_t offset, std::vector<int64_t> shape) {
    const std::vector<float> w = ckpt.read(name, shape, dtypes);
    std::copy(w.begin(), w.end(), params.begin() + offset);
  };

  copy("model.embed_tokens.weight", reg.embed(), {c.vocab_size, d});
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const auto& L = reg.layer(i);
    const std::string p = "model.layers." + std::to_string(i) + ".";
    copy(p + "input_layernorm.weight", L.attn_norm, {d});
    linear(p + "self_attn.q_proj.weight", L.wq, d, c.q_dim(), true);
    linear(p + "self_attn.k_proj.weight", L.wk, d, c.kv_dim(), true);
    linear(p + "self_attn.v_proj.weight", L.wv, d, c.kv_dim(), false);
    linear(p + "self_attn.o_proj.weight", L.wo, c.q_dim(), d, false);
    if (c.qkv_bias) {
      bias(p + "self_attn.q_proj.bias", L.bq, c.q_dim(), true);
      bias(p + "self_attn.k_proj.bias", L.bk, c.kv_dim(), true);
      bias(p + "self_attn.v_proj.bias", L.bv, c.kv_dim(), false);
    }
    if (c.o_bias) bias(p + "self_attn.o_proj.bias", L.bo, d, false);
    copy(p + "post_attention_layernorm.weight", L.mlp_norm, {d});
    linear(p + "mlp.gate_proj.weight", L.w_gate, d, c.d_ff, false);
    linear(p + "mlp.up_proj.weight", L.w_up, d, c.d_ff, false);
    linear(p + "mlp.down_proj.weight", L.w_down, c.d_ff, d, false);
  }
  copy("model.norm.weight", reg.final_norm(), {d});
  if (tied || !ckpt.tensors().count("lm_head.weight")) {
    if (!tied) throw Error(ErrorKind::format, dir + ": has no 'lm_head.weight' and config.json does not tie it to the embedding");
    // The head is the embedding's transpose: head[k, v] = embed[v, k].
    for (int64_t v = 0; v < c.vocab_size; ++v)
      for (int64_t k = 0; k < d; ++k)
        params[static_cast<size_t>(reg.head() + k * c.vocab_size + v)] = params[static_cast<size_t>(reg.embed() + v * d + k)];
  } else {
    linear("lm_head.weight", reg.head(), d, c.vocab_size, false);
  }
  // Anything else in the checkpoint is a part lockstep's model lacks; old checkpoints' RoPE
  // frequency buffers (rotary_emb.inv_freq) are recomputed, not weights.
  for (const auto& [name, s] : ckpt.tensors()) {
    if (ckpt.used().count(name)) continue;
    if (name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (tied && name == "lm_head.weight") continue;  // a tied copy some checkpoints keep
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0)
      refuse(s.file, "tensor '" + name + "' is a bias that config.json's model does not have; lockstep's "
                     "model takes biases on q, k, v (Qwen2, attention_bias) and o (attention_bias) only");
    refuse(s.file, "tensor '" + name + "' is not part of a Llama model lockstep imports");
  }

  ModelMetadata meta;
  meta.eos_token_ids = interop::hf_eos_token_ids(dir, cfg, where, c.vocab_size);
  const bool with_tokenizer = tokenizer != nullptr;
  if (!with_tokenizer) {
    write_model_directory(out, c, params, meta);
  } else {
    // The model directory plus the tokenizer file, named in model.json, appearing whole.
    const std::string from = dir + "/" + tokenizer_name;
    const std::string bytes = format::read_text_file(from, size_t{256} << 20);
    if (sha256_hex(bytes.data(), bytes.size()) != tokenizer->sha256()) throw Error(ErrorKind::io, from + ": changed while importing");
    // A tokenizer.json may hold fewer tokens than the embedding has rows (Qwen2: 151,665 for
    // 151,936); the ids past it are never produced by text. SentencePiece's count is exact.
    const bool hf = tokenizer_name == "tokenizer.json";
    if (hf ? tokenizer->size() > c.vocab_size : tokenizer->size() != c.vocab_size)
      refuse(from, "holds " + std::to_string(tokenizer->size()) + " pieces but config.json's vocab_size is " +
                       std::to_string(c.vocab_size));
    interop::write_model_with_tokenizer(
        out, [&](const std::string& model_dir) { write_model_directory(model_dir, c, params, meta); },
        {tokenizer_name, hf ? "huggingface" : "sentencepiece", bytes, chat_template});
  }
  ImportHfResult r;
  r.config = c;
  r.files = ckpt.files();
  r.tied = tied;
  r.dtypes.assign(dtypes.begin(), dtypes.end());
  r.tokenizer_model = with_tokenizer;
  r.tokenizer_file = tokenizer_name;
  r.chat_template = !chat_template.empty();
  r.eos_token_ids = meta.eos_token_ids;
  return r;
}

}  // namespace lockstep
