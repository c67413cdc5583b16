// Reading and writing a model's weights file (params.safetensors) against its registry.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "format/model_json.hpp"
#include "lockstep/config.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"

namespace lockstep::format {

// The packed weight formats (model.json's weights.format, the file's `weights` metadata; the
// codecs are quant/q8.hpp and quant/q4.hpp) and the name of a packed matrix's scale tensor beside
// it (`<name>.scale`).
inline constexpr const char* kQ8Format = "q8";
inline constexpr const char* kQ4Format = "q4";
inline constexpr const char* kQ8ScaleSuffix = ".scale";

class MappedFile;

// Reads `path`, checks it against the registry (every parameter present once, nothing else,
// F32 of the registry's shape), checks every value finite and the SHA-256 of the f32 parameters
// against `expected_sha256`, and returns them flat in registry order. Refusals are
// Error(format) naming the file and the problem.
//
// `loaded` lists parameters the file leaves out (model.json's `loaded`): the file must hold every
// other parameter and none of these, which are read from their own files by read_loaded_tensor
// before the SHA-256 check.
//
// `weight_format` "q8": every matrix parameter is I8 with an F32 `<name>.scale` [columns] beside
// it, expanded exactly (quant/q8.hpp); vectors stay F32. With `q8_out`, the int8 values and
// scales of every matrix read are kept there too (by registry offset). `weight_format` "q4":
// every matrix [K, N] is U8 [K, (N + 1) / 2] (two 4-bit values a byte) with an F32
// `<name>.scale` [ceil(K / 32), N] (quant/q4.hpp), kept in `q4_out` when given.
//
// `give_back_packed` (with q8_out or q4_out): the expanded values of every matrix kept there but
// `embed` are checked and hashed, then their whole pages given back (release_float_pages), so
// that they read as zeros: for a caller that computes from the packed form and expands it again
// on demand (Model::load), which then holds no f32 copy of those matrices even while loading.
std::vector<float> read_weights(const std::string& path, const ModelConfig& config,
                                const std::string& expected_sha256,
                                std::span<const LoadedTensor> loaded = {},
                                const std::string& weight_format = "float32",
                                quant::Q8Matrices* q8_out = nullptr,
                                quant::Q4Matrices* q4_out = nullptr, bool give_back_packed = false);

// read_weights on a file already in memory (`path` names it in refusals): the checks, in order,
// are the file's structure (parse_safetensors), every tensor's name, dtype and shape against the
// registry, and only then, once the file is known to hold the parameters, one allocation of the
// configuration's size. A file too small for model.json's configuration is refused with both
// sizes before that allocation. `mapped`, when `bytes` are its bytes, has each tensor's pages
// dropped once read, so that the file and the parameters are not both resident at the peak.
std::vector<float> read_weights_bytes(std::span<const uint8_t> bytes, const std::string& path,
                                      const ModelConfig& config, const std::string& expected_sha256,
                                      std::span<const LoadedTensor> loaded = {},
                                      const std::string& weight_format = "float32",
                                      quant::Q8Matrices* q8_out = nullptr,
                                      quant::Q4Matrices* q4_out = nullptr,
                                      const MappedFile* mapped = nullptr, bool give_back_packed = false);

// Writes the flat parameters as a safetensors file of one F32 tensor per registry entry, in
// registry order (so the data section is exactly the flat vector's bytes).
// Parameters named in `omit` are left out of the file (a checkpoint's :load parameters).
void write_weights(const std::string& path, const ModelConfig& config,
                   std::span<const float> parameters, std::span<const std::string> omit = {});

// Writes the parameters packed as q8 (quant/q8.hpp) and returns the expanded f32 parameters
// they now stand for (whose SHA-256 model.json records).
std::vector<float> write_weights_q8(const std::string& path, const ModelConfig& config,
                                    std::span<const float> parameters);
// The same for q4 (quant/q4.hpp).
std::vector<float> write_weights_q4(const std::string& path, const ModelConfig& config,
                                    std::span<const float> parameters);

// One F32 tensor of `shape` named `tensor` in the safetensors file at `path`, every value finite,
// and the SHA-256 of the whole file. Refusals: Error(io) when the file cannot be read,
// Error(format) naming the file and the problem.
struct TensorFromFile {
  std::vector<float> values;
  std::string file_sha256;
};
TensorFromFile read_tensor_file(const std::string& path, const std::string& tensor,
                                const std::vector<int64_t>& shape);

// A loaded parameter's values, refused with code::load_changed (LS-LOAD-001) when its file is
// gone or its SHA-256 is no longer the one recorded.
std::vector<float> read_loaded_tensor(const LoadedTensor& loaded,
                                      const std::vector<int64_t>& shape);

}  // namespace lockstep::format
