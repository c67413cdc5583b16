// model.json: what a model directory holds and how to read its weights (docs/FORMAT.md).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep::format {

// The version lockstep writes; it reads every version from kOldestModelFormatVersion up to it
// (docs/FORMAT.md, "Versions").
inline constexpr int kModelFormatVersion = 2;
inline constexpr int kOldestModelFormatVersion = 1;
inline constexpr const char* kModelFormatName = "lockstep.model";
inline constexpr const char* kArchitecture = "decoder-lm";
inline constexpr const char* kMatrixLayout = "in_out";
inline constexpr const char* kWeightsFile = "params.safetensors";
inline constexpr const char* kTrainedWeightsFile = "trained.safetensors";
// weights.format of an int8dot model: the weights file is a GGUF file (docs/FORMAT.md, "Profiles").
inline constexpr const char* kGgufFormat = "gguf";
inline constexpr const char* kGgufWeightsFile = "model.gguf";
inline constexpr size_t kMaxModelJsonBytes = size_t{16} << 20;

struct WeightsFile {
  std::string file;    // relative to the model directory
  std::string format;  // "float32", or a packed format
  std::string sha256;  // of the expanded f32 parameters, little-endian, registry order
};

// A frozen parameter a checkpoint names instead of holding (a run's :load): read from `file`,
// whose bytes must still have this SHA-256.
struct LoadedTensor {
  std::string name;    // the registry parameter
  std::string file;    // a safetensors file; a relative path is from the current directory
  std::string tensor;  // the tensor's name inside that file
  std::string sha256;  // of the whole file
};

struct ModelDescription {
  ModelConfig config;
  std::string profile;  // the profile's name (find_profile)
  int format_version = kModelFormatVersion;  // as read; render writes kModelFormatVersion
  Precision precision = Precision::f32;
  ModelSource source;  // step, slug, checkpoint; directory is not stored
  WeightsFile weights;                  // the weights served by default
  bool weights_averaged = false;        // they are a run's EMA averages
  std::optional<WeightsFile> trained;   // a checkpoint's trained weights beside its averages
  // Parameters the weights files leave out, read from their own files (model.json's `loaded`,
  // written only when not empty).
  std::vector<LoadedTensor> loaded;
  // The ids that end a generation (`eos_token_ids`, written only when not empty).
  std::vector<int32_t> eos_token_ids;
};

// Parses and checks model.json: the format name and version, the profile (one this build computes,
// and the one its version and weights format allow),
// the architecture, matrix layout, configuration, the parameter list against the registry, the
// declared inputs and outputs. Each refusal is an Error(format) starting with `what`.
ModelDescription parse_model_json(std::string_view text, const std::string& what);
std::string render_model_json(const ModelDescription& description);

}  // namespace lockstep::format
