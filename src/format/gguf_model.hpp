// A GGUF file of llama.cpp's `llama` or `qwen2` architecture read as a lockstep model
// (docs/FORMAT.md, "GGUF import"): the configuration from its keys, every tensor mapped to a
// registry parameter (qwen2's query and key rows put in adjacent RoPE pairs), F32, F16 and BF16
// widened to f32, Q8_0, Q4_0 and Q5_0 matrices kept as the file's blocks, and the K-quants kept as
// blocks too or widened (`k_quant_blocks`); the blocks are dequantized exactly beside them, for
// what reads f32 parameters: the embedding lookup, the reference device's copy, parameters(). Read by `lockstep import gguf` and by the loader of a
// model whose weights file is a GGUF file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "format/gguf_read.hpp"
#include "lockstep/config.hpp"
#include "quant/gguf_blocks.hpp"

namespace lockstep::format {

struct GgufModel {
  ModelConfig config;
  std::vector<float> parameters;  // registry order, f32 (blocks dequantized: w = dw * float(q))
  quant::BlockMatrices blocks;    // the matrices (embedding included) the file holds in blocks
  std::vector<int32_t> eos_token_ids;  // tokenizer.ggml.eos_token_id, when within the vocabulary
  std::string vocabulary;              // tokenizer.ggml.model ("llama", "gpt2", ...; "" if none)
};

// `length`: the window (default: llama.context_length, which must then be at most 65536).
// Each refusal is an Error(format) starting with `what`, naming the key or tensor and the problem.
// `owner`, when given, keeps the file's bytes alive (its mapping): the matrices in blocks view
// them; without it they are copies.
// `k_quant_blocks`: Q4_K, Q5_K and Q6_K matrices kept as blocks (profile lockstep-int8dot-2)
// rather than widened to f32 (lockstep-int8dot-1, and the f32 profile of a file with no other
// blocks).
GgufModel read_gguf_llama(const GgufFile& file, const std::string& what, std::optional<int32_t> length = std::nullopt,
                          std::shared_ptr<const void> owner = nullptr, bool k_quant_blocks = false);

// Llama 3's RoPE scaling as llama.cpp's converter writes it (convert_hf_to_gguf.py, the tensor
// rope_freqs.weight): each pair's frequency divisor, `factor` where the wavelength passes L / low,
// 1 where it is below L / high, the smooth blend between; in f64 from lockstep's frequencies.
std::vector<double> llama3_rope_divisors(const RopeScaling& scaling, int32_t head_dim, float theta);

// Writes a model directory of `profile` (an int8dot one) at `dir` (which must not exist; it
// appears whole or not at all): `gguf`'s bytes as DIR/model.gguf, and model.json naming it with
// weights.format "gguf" and parameters_sha256 the SHA-256 of the file's bytes.
void write_gguf_model_directory(const std::string& dir, const ModelConfig& config, std::span<const uint8_t> gguf,
                                const std::vector<int32_t>& eos_token_ids, const char* profile);

}  // namespace lockstep::format
