// Other tools' model files: export to GGUF for llama.cpp, import from a Hugging Face Llama
// checkpoint (docs/FORMAT.md, "GGUF export" and "Hugging Face import").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep {

struct GgufOptions {
  std::string type = "f32";  // "f32", "f16" or "q8_0": how the matrices are stored
  std::string name;          // general.name; empty: the model directory's name
};

struct GgufResult {
  std::string model_dir;  // the model directory read
  ModelConfig config;
  int64_t tensors = 0;
  uint64_t bytes = 0;  // the file's size
  std::string type;
  std::string architecture;  // "llama", or "qwen2" for a model with q, k and v biases
};

// Writes `model` (a model directory, checkpoint step or location) as a GGUF version 3 file of
// llama.cpp's `llama` architecture, or `qwen2` for a model with q, k and v biases, at `file`
// (written under a temporary name and renamed into place); Llama 3's RoPE scaling as the
// rope_freqs tensor llama.cpp's converter writes. A model with a SentencePiece tokenizer carries it as llama.cpp's `llama` vocabulary; a
// byte-level model (vocab_size 256, no tokenizer) a `gpt2` BPE vocabulary of the bytes with no
// merges; any other is refused. Throws Error naming what it refuses.
GgufResult export_gguf(const std::string& model, const std::string& file, const GgufOptions& options = {});

struct ImportHfOptions {
  int32_t length = 0;  // the window; 0: config.json's max_position_embeddings (at most 65,536)
  int32_t batch = 8;   // the training batch model.json records
  bool ids_only = false;  // import a directory whose tokenizer lockstep cannot read
};

struct ImportHfResult {
  ModelConfig config;
  std::vector<std::string> files;  // the safetensors files read
  bool tied = false;               // tie_word_embeddings: the head is the embedding's transpose
  std::vector<std::string> dtypes; // the dtypes met, e.g. {"BF16"}
  bool tokenizer_model = false;    // a tokenizer was imported (named in model.json)
  std::string tokenizer_file;      // which: "tokenizer.model" (SentencePiece), "tokenizer.json" or ""
  bool chat_template = false;      // tokenizer_config.json's chat template was kept (chat_template.json)
  // eos_token_id (generation_config.json's over config.json's), kept as model.json's eos_token_ids
  std::vector<int32_t> eos_token_ids;
};

// Reads a Hugging Face LlamaForCausalLM directory (config.json and model.safetensors or
// model.safetensors.index.json with its shards) and writes a lockstep model directory at `out`
// (which must not exist). F16 and BF16 tensors are widened exactly to f32; the query and key
// projections' rows are permuted from Hugging Face's rotate_half layout to lockstep's adjacent
// pairs. Refuses, naming the field, what the architecture lacks.
ImportHfResult import_hf(const std::string& dir, const std::string& out, const ImportHfOptions& options = {});

struct ImportGgufOptions {
  int32_t length = 0;     // the window; 0: llama.context_length (at most 65,536)
  bool ids_only = false;  // import without the file's vocabulary (a model of token ids)
  // Widen Q4_K, Q5_K and Q6_K matrices to f32 (profile lockstep-int8dot-1, or lockstep-f32-1 for
  // a file with no other blocks) instead of computing them in integers (lockstep-int8dot-2).
  bool widen_k_quants = false;
};

struct ImportGgufResult {
  ModelConfig config;
  std::string profile;                // the model's: an int8dot one when any matrix is in blocks
  std::vector<std::string> types;     // the tensor types met, e.g. {"F32", "Q4_0"}
  int64_t block_matrices = 0;         // matrices kept as the file's blocks
  int64_t widened_k_quants = 0;       // Q4_K, Q5_K, Q6_K tensors widened to f32 (widen_k_quants)
  bool tied = false;                  // no output.weight: the head is token_embd's rows
  std::string vocabulary;             // tokenizer.ggml.model, "" when the file has none
  std::string pre;                    // tokenizer.ggml.pre of a gpt2 vocabulary
  std::string tokenizer_file;         // what it became: "tokenizer.json", "tokenizer.model"; "" for
                                      // none (ids_only, no vocabulary) or the 256 bytes
  bool chat_template = false;         // tokenizer.chat_template became chat_template.json
  std::vector<int32_t> eos_token_ids; // tokenizer.ggml.eos_token_id, eot_token_id, eom_token_id
};

// Reads a GGUF file of llama.cpp's `llama` or `qwen2` architecture (F32, F16, BF16, Q8_0, Q4_0,
// Q5_0, Q4_K, Q5_K, Q6_K tensors) and writes a lockstep model directory at `out` (which must not
// exist; it appears whole or not at all). With any matrix in blocks the model is of profile
// lockstep-int8dot-2 (some in Q4_K, Q5_K or Q6_K) or lockstep-int8dot-1 (only Q8_0, Q4_0, Q5_0)
// and its weights file is a byte copy of the GGUF file (blocks bit for bit); otherwise an f32
// model. F16 and BF16 (and the K-quants with `widen_k_quants`) are widened to f32 by exact rules
// (docs/ARITHMETIC.md). The file's vocabulary becomes the model's tokenizer (a `gpt2` one a
// tokenizer.json, a `llama` one a SentencePiece tokenizer.model; docs/FORMAT.md, "GGUF import")
// and its tokenizer.chat_template the model's chat template, unless `ids_only`. Throws Error
// naming the tensor, key or type it refuses (another tokenizer.ggml.model or pre among them).
ImportGgufResult import_gguf(const std::string& file, const std::string& out, const ImportGgufOptions& options = {});

}  // namespace lockstep
