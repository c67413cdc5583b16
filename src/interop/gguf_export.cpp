// export_gguf: a lockstep model as llama.cpp's `llama` architecture, or `qwen2` for a model with
// q, k and v biases (docs/FORMAT.md, "GGUF export"). The two models compute the same function:
// llama.cpp's LLAMA rope type (LLAMA_ROPE_TYPE_NORM) rotates adjacent pairs (x[2i], x[2i+1]) as
// lockstep does, so a llama file's query and key matrices need no permutation; a qwen2 file's
// are written in NeoX order, the rotation llama.cpp gives that architecture. Lockstep's [in, out]
// matrices are transposed into ggml's order, where ne[0] (the contiguous dimension) is the input.
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.hpp"
#include "format/gguf_model.hpp"
#include "format/mapped_file.hpp"
#include "format/rope_pairs.hpp"
#include "interop/gguf_vocab.hpp"
#include "lockstep/chat_template.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/interop.hpp"
#include "lockstep/model.hpp"
#include "lockstep/tokenizer.hpp"
#include "model/model_impl.hpp"

namespace lockstep {
namespace {

using format::GgmlType;

// GPT-2's byte-to-unicode map: the printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
// themselves; the others, in increasing order, for U+0100, U+0101, ... Each as UTF-8.
std::vector<std::string> gpt2_byte_strings() {
  auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
  std::vector<std::string> out(256);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : static_cast<uint32_t>(next++);
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {  // every code point here is below U+0800: two bytes
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out[static_cast<size_t>(b)] = s;
  }
  return out;
}

// rows x cols f32 values (row-major, a row of ne[0] = cols values) encoded as `type`.
std::vector<uint8_t> encode(const std::vector<float>& values, int64_t cols, GgmlType type, const std::string& name) {
  std::vector<uint8_t> out;
  switch (type) {
    case GgmlType::f32:
      out.resize(values.size() * 4);
      std::memcpy(out.data(), values.data(), out.size());
      break;
    case GgmlType::f16:
      out.reserve(values.size() * 2);
      for (size_t i = 0; i < values.size(); ++i) {
        const uint16_t h = format::f16_bits_from_f32(values[i]);
        if ((h & 0x7c00u) == 0x7c00u)
          throw Error(ErrorKind::invalid_argument, "tensor '" + name + "' element " + std::to_string(i) + " (" +
                                                       std::to_string(values[i]) +
                                                       ") is past f16's range; export with --type f32");
        out.push_back(static_cast<uint8_t>(h & 0xff));
        out.push_back(static_cast<uint8_t>(h >> 8));
      }
      break;
    case GgmlType::q8_0:
      out.reserve(values.size() / format::kQ8Block * format::kQ8BlockBytes);
      for (size_t r = 0; r < values.size(); r += static_cast<size_t>(cols))
        format::append_q8_0_row(std::span<const float>(values).subspan(r, static_cast<size_t>(cols)), out,
                                "tensor '" + name + "'");
      break;
    case GgmlType::q4_0:
    case GgmlType::q5_0:  // never quantized here: only an int8dot model's blocks, written as they are
    case GgmlType::q4_k:
    case GgmlType::q5_k:
    case GgmlType::q6_k:
      throw Error(ErrorKind::internal, "tensor '" + name + "': lockstep does not quantize to Q4_0, Q5_0 or K-quants");
  }
  return out;
}

}  // namespace

GgufResult export_gguf(const std::string& model_path, const std::string& file, const GgufOptions& options) {
  GgmlType matrix_type;
  uint32_t file_type;  // llama.cpp's llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7
  if (options.type == "f32") {
    matrix_type = GgmlType::f32, file_type = 0;
  } else if (options.type == "f16") {
    matrix_type = GgmlType::f16, file_type = 1;
  } else if (options.type == "q8_0") {
    matrix_type = GgmlType::q8_0, file_type = 7;
  } else {
    throw Error(ErrorKind::invalid_argument, "--type must be f32, f16 or q8_0, not '" + options.type + "'");
  }
  if (file.empty()) throw Error(ErrorKind::invalid_argument, "the GGUF file's path is empty");

  const ResolvedPath resolved = resolve_model_path(model_path);
  const auto model = Model::load(resolved.model_dir);
  const ModelConfig& c = model->config();
  // Biases on q, k and v alone are Qwen2's, written as llama.cpp's `qwen2` architecture, whose
  // query and key rows are Hugging Face's NeoX order (llama.cpp rotates i with i + head_dim / 2
  // there): each written from lockstep's adjacent pairs, as import gguf reads them back. An
  // output bias (Llama's attention_bias) has no architecture here.
  if (c.o_bias)
    throw Error(ErrorKind::unsupported, resolved.model_dir + ": the model has an attention output bias (o_bias); "
                                            "GGUF export writes the llama and qwen2 architectures, which have none");
  const bool qwen2 = c.qkv_bias;
  const std::string arch = qwen2 ? "qwen2" : "llama";
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::for_model(resolved.model_dir);
  // A tokenizer.json becomes llama.cpp's `gpt2` vocabulary where its stages are those of a
  // tokenizer.ggml.pre llama.cpp names (interop/gguf_vocab.hpp), else it is refused by name.
  const bool hf = tokenizer && std::string_view(tokenizer->type()) == "huggingface";
  std::optional<interop::Gpt2Keys> gpt2;
  if (hf) {
    const std::string path = resolved.model_dir + "/" + tokenizer->file();
    gpt2 = interop::gpt2_keys_of(format::read_text_file(path, size_t{256} << 20), path, c.vocab_size);
  }
  if (tokenizer && !hf && tokenizer->size() != c.vocab_size)
    throw Error(ErrorKind::format, resolved.model_dir + ": the tokenizer has " + std::to_string(tokenizer->size()) +
                                       " pieces but the vocabulary " + std::to_string(c.vocab_size) + " ids");
  if (!tokenizer && c.vocab_size != 256)
    throw Error(ErrorKind::unsupported,
                resolved.model_dir + ": the vocabulary has " + std::to_string(c.vocab_size) +
                    " ids and the model has no tokenizer; GGUF export needs token strings: a tokenizer, or the "
                    "256 bytes of a byte-level model");
  const ParameterRegistry& reg = model->registry();
  const std::span<const float> params = model->parameters();

  format::GgufWriter w(32);
  std::string name = options.name;
  if (name.empty()) {
    name = resolved.model_dir;
    while (name.size() > 1 && name.back() == '/') name.pop_back();
    if (const size_t slash = name.rfind('/'); slash != std::string::npos) name = name.substr(slash + 1);
  }
  w.add_string("general.architecture", arch);
  w.add_string("general.name", name);
  w.add_u32("general.file_type", file_type);
  w.add_u32("general.alignment", 32);
  format::add_llama_config(w, c, arch);

  if (gpt2) {
    // The ids that end a generation are eos, then eot and eom, as import gguf reads them.
    const std::span<const int32_t> ends = model->eos_token_ids();
    if (ends.size() > 3)
      throw Error(ErrorKind::unsupported, resolved.model_dir + ": the model has " + std::to_string(ends.size()) +
                                              " eos_token_ids; a GGUF file names three (eos, eot, eom)");
    if (gpt2->eos >= 0 && !ends.empty() && ends[0] != gpt2->eos)
      throw Error(ErrorKind::unsupported, resolved.model_dir + ": the tokenizer adds token " + std::to_string(gpt2->eos) +
                                              " after a text but the first of eos_token_ids is " + std::to_string(ends[0]) +
                                              "; a GGUF file has one tokenizer.ggml.eos_token_id");
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", gpt2->pre);
    w.add_string_array("tokenizer.ggml.tokens", gpt2->tokens);
    w.add_i32_array("tokenizer.ggml.token_type", gpt2->types);
    w.add_string_array("tokenizer.ggml.merges", gpt2->merges);
    if (gpt2->bos >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(gpt2->bos));
    if (!ends.empty() || gpt2->eos >= 0)
      w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(ends.empty() ? gpt2->eos : ends[0]));
    if (ends.size() > 1) w.add_u32("tokenizer.ggml.eot_token_id", static_cast<uint32_t>(ends[1]));
    if (ends.size() > 2) w.add_u32("tokenizer.ggml.eom_token_id", static_cast<uint32_t>(ends[2]));
    w.add_bool("tokenizer.ggml.add_bos_token", gpt2->bos >= 0);
    w.add_bool("tokenizer.ggml.add_eos_token", gpt2->eos >= 0);
  } else if (tokenizer) {
    // The SentencePiece vocabulary as llama.cpp's `llama` tokenizer: each piece (spaces as U+2581),
    // its score and type, the special ids; BOS is added as Llama's SentencePiece models expect.
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    for (int32_t id = 0; id < tokenizer->size(); ++id) {
      Tokenizer::Piece p = tokenizer->piece(id);
      tokens.push_back(std::move(p.text));
      scores.push_back(p.score);
      types.push_back(p.type);
    }
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_f32_array("tokenizer.ggml.scores", scores);
    w.add_i32_array("tokenizer.ggml.token_type", types);
    if (tokenizer->bos() >= 0) w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(tokenizer->bos()));
    if (tokenizer->eos() >= 0) w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(tokenizer->eos()));
    if (tokenizer->unk() >= 0) w.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(tokenizer->unk()));
    w.add_bool("tokenizer.ggml.add_bos_token", tokenizer->bos() >= 0);
    w.add_bool("tokenizer.ggml.add_eos_token", false);
  } else {
    // The byte vocabulary: id b is byte b, as GPT-2's byte-to-unicode string; no merges, so
    // llama.cpp's BPE tokenizes text into its bytes. Type 1 is llama.cpp's NORMAL token.
    const std::vector<std::string> tokens = gpt2_byte_strings();
    const std::vector<int32_t> token_types(tokens.size(), 1);
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "default");
    w.add_string_array("tokenizer.ggml.tokens", tokens);
    w.add_i32_array("tokenizer.ggml.token_type", token_types);
    w.add_string_array("tokenizer.ggml.merges", std::vector<std::string>{});
    w.add_bool("tokenizer.ggml.add_bos_token", false);
    w.add_bool("tokenizer.ggml.add_eos_token", false);
  }
  // The chat template, as llama.cpp reads it (import gguf takes it back).
  if (const std::unique_ptr<ChatTemplate> chat = ChatTemplate::for_model(resolved.model_dir))
    w.add_string("tokenizer.chat_template", chat->source());

  // The file's row of lockstep's output j: a qwen2 query's or key's in NeoX order.
  auto file_row = [&](bool neox, int64_t j) { return neox ? format::neox_row(j, c.head_dim()) : j; };
  // A vector: one row, always F32 (as llama.cpp's converter keeps norms and biases).
  auto vector = [&](const std::string& gguf_name, int64_t offset, int64_t n, bool neox = false) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) v[static_cast<size_t>(file_row(neox, j))] = params[static_cast<size_t>(offset + j)];
    w.add_tensor(gguf_name, {static_cast<uint64_t>(n)}, GgmlType::f32, encode(v, n, GgmlType::f32, gguf_name));
  };
  // A matrix already in ggml's order: rows of `cols` values (ne = {cols, rows}). Q8_0 needs
  // rows of whole 32-value blocks; a row that is not falls back to F16.
  auto matrix_rows = [&](const std::string& gguf_name, std::vector<float> rows_data, int64_t cols, int64_t rows) {
    const GgmlType t = matrix_type == GgmlType::q8_0 && cols % format::kQ8Block != 0 ? GgmlType::f16 : matrix_type;
    w.add_tensor(gguf_name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)}, t,
                 encode(rows_data, cols, t, gguf_name));
  };
  // An int8dot model's matrix in blocks (an imported GGUF's) is written as the very blocks it
  // computes from, whatever --type says: its rows are already ggml's (ne = {in, out}).
  const quant::BlockMatrices* blocks = model->impl().blocks.get();
  auto as_blocks = [&](const std::string& gguf_name, int64_t offset, bool neox) {
    if (!blocks) return false;
    const auto it = blocks->find(offset);
    if (it == blocks->end()) return false;
    const quant::BlockRows& b = it->second;
    const size_t row = b.rows.size() / static_cast<size_t>(b.N);
    std::vector<uint8_t> rows(b.rows.size());
    for (int64_t j = 0; j < b.N; ++j)
      std::memcpy(rows.data() + static_cast<size_t>(file_row(neox, j)) * row, b.rows.data() + static_cast<size_t>(j) * row, row);
    w.add_tensor(gguf_name, {static_cast<uint64_t>(b.K), static_cast<uint64_t>(b.N)},
                 static_cast<GgmlType>(static_cast<uint32_t>(b.type)), std::move(rows));
    return true;
  };
  // A lockstep matrix [in, out] (row-major) transposed to ggml's ne = {in, out}: W[0..in, o] is
  // row o (row file_row(neox, o) of a qwen2 query or key).
  auto linear = [&](const std::string& gguf_name, int64_t offset, int64_t in, int64_t out, bool neox = false) {
    if (as_blocks(gguf_name, offset, neox)) return;
    std::vector<float> t(static_cast<size_t>(in * out));
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        t[static_cast<size_t>(file_row(neox, o) * in + i)] = params[static_cast<size_t>(offset + i * out + o)];
    matrix_rows(gguf_name, std::move(t), in, out);
  };

  // token_embd: ggml ne = {d_model, vocab}, row t is token t: lockstep's embed as it is.
  // Llama 3's RoPE scaling: the converter's rope_freqs tensor (import gguf reads it back).
  if (c.rope_scaling) {
    std::vector<float> divisors;
    for (double v : format::llama3_rope_divisors(*c.rope_scaling, c.head_dim(), c.rope_theta))
      divisors.push_back(static_cast<float>(v));
    w.add_tensor("rope_freqs.weight", {divisors.size()}, GgmlType::f32,
                 encode(divisors, static_cast<int64_t>(divisors.size()), GgmlType::f32, "rope_freqs.weight"));
  }
  if (!as_blocks("token_embd.weight", reg.embed(), false))
    matrix_rows("token_embd.weight",
              std::vector<float>(params.begin() + reg.embed(), params.begin() + reg.embed() + int64_t{c.vocab_size} * c.d_model),
              c.d_model, c.vocab_size);
  for (int32_t i = 0; i < c.n_layers; ++i) {
    const auto& L = reg.layer(i);
    const std::string p = "blk." + std::to_string(i) + ".";
    vector(p + "attn_norm.weight", L.attn_norm, c.d_model);
    linear(p + "attn_q.weight", L.wq, c.d_model, c.q_dim(), qwen2);
    linear(p + "attn_k.weight", L.wk, c.d_model, c.kv_dim(), qwen2);
    linear(p + "attn_v.weight", L.wv, c.d_model, c.kv_dim());
    if (qwen2) {
      vector(p + "attn_q.bias", L.bq, c.q_dim(), true);
      vector(p + "attn_k.bias", L.bk, c.kv_dim(), true);
      vector(p + "attn_v.bias", L.bv, c.kv_dim());
    }
    linear(p + "attn_output.weight", L.wo, c.q_dim(), c.d_model);
    vector(p + "ffn_norm.weight", L.mlp_norm, c.d_model);
    linear(p + "ffn_gate.weight", L.w_gate, c.d_model, c.d_ff);
    linear(p + "ffn_up.weight", L.w_up, c.d_model, c.d_ff);
    linear(p + "ffn_down.weight", L.w_down, c.d_ff, c.d_model);
  }
  vector("output_norm.weight", reg.final_norm(), c.d_model);
  linear("output.weight", reg.head(), c.d_model, c.vocab_size);

  GgufResult r;
  r.model_dir = resolved.model_dir;
  r.config = c;
  r.tensors = static_cast<int64_t>(w.tensor_count());
  r.type = options.type;
  r.architecture = arch;
  r.bytes = w.write(file);
  return r;
}

}  // namespace lockstep
