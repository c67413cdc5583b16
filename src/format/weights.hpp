// Reading and writing a model's weights file (params.safetensors) against its registry.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "format/model_json.hpp"
#include "lockstep/config.hpp"

namespace lockstep::format {

// Reads `path`, checks it against the registry (every parameter present once, nothing else,
// F32 of the registry's shape), checks every value finite and the SHA-256 of the f32 parameters
// against `expected_sha256`, and returns them flat in registry order. Refusals are
// Error(format) naming the file and the problem.
std::vector<float> read_weights(const std::string& path, const ModelConfig& config,
                                const std::string& expected_sha256);

// Writes the flat parameters as a safetensors file of one F32 tensor per registry entry, in
// registry order (so the data section is exactly the flat vector's bytes).
void write_weights(const std::string& path, const ModelConfig& config,
                   std::span<const float> parameters);

}  // namespace lockstep::format
