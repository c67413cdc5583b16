// Model directories and checkpoint locations on disk (docs/FORMAT.md).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep {

// A tensor a model takes or gives, as serve's handshake and `inspect` describe it.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // "i32", "f32", ...
};
// inputs: `inputs` [1, length] i32. outputs: `logits` [1, length, vocab] f32 and
// `hidden` [1, length, d_model] f32.
std::vector<TensorSpec> model_inputs(const ModelConfig& config);
std::vector<TensorSpec> model_outputs(const ModelConfig& config);

// What model.json says beside the configuration.
struct ModelMetadata {
  Precision precision = Precision::f32;
  ModelSource source;  // directory is not written; step, slug and checkpoint are
  // The ids that end a generation (model.json's `eos_token_ids`, written only when not empty;
  // each within the vocabulary).
  std::vector<int32_t> eos_token_ids;
};

// Writes DIR/model.json and DIR/params.safetensors into a temporary sibling and renames it to
// DIR. Refuses a DIR that exists. Nothing is left at DIR when it fails.
void write_model_directory(const std::string& dir, const ModelConfig& config,
                           std::span<const float> parameters, const ModelMetadata& metadata);

// What a path names: a model directory, a checkpoint step directory, a checkpoint location (its
// newest complete step) or a model.json file. Throws Error naming the path when it is none.
struct ResolvedPath {
  std::string model_dir;          // the directory holding model.json
  bool checkpoint_step = false;   // a step-NNNNNNNN directory written by training
  std::optional<int64_t> step;    // its step, from the directory name
};
ResolvedPath resolve_model_path(std::string_view path);

// "step-00000200"
std::string step_directory_name(int64_t step);
// The complete steps of a checkpoint location, oldest first.
std::vector<int64_t> list_checkpoint_steps(const std::string& location);

}  // namespace lockstep
