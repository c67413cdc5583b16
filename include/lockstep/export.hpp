// lockstep export: a checkpoint's model and weights as a model directory of their own (spec
// document 000, "export"), optionally packed as q8.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep {

struct ExportOptions {
  // A run file to compare with the one the checkpoint holds: a different model configuration is
  // refused; other edits are allowed and reported in ExportResult::moved_lines. Empty: none.
  std::string run_file;
  bool trained = false;  // the trained weights instead of the EMA averages
  std::string pack;      // "" (f32), "q8": int8 with one f32 scale per output column, or "q4":
                         // 4-bit with one f32 scale per 32 inputs per output column
};

struct ExportResult {
  std::string checkpoint;  // the step directory exported
  int64_t step = 0;
  std::string slug;
  std::vector<std::string> moved_lines;  // "-12: old text" / "+12: new text", run file vs checkpoint
  int64_t tensors = 0;   // tensors in the written params.safetensors
  uint64_t bytes = 0;    // its size
  ModelConfig config;
  std::string weight_format;
};

// Writes DIR (which must not exist) from `checkpoint`, a step directory or a checkpoint location
// (its newest complete step); a model directory is refused. model.json names the checkpoint, its
// step and slug; params.safetensors holds every weight the model reads, a frozen :load parameter
// included (read from its file, refused with LS-LOAD-001 when that file changed). Nothing is left
// at DIR when it fails.
ExportResult export_model(const std::string& checkpoint, const std::string& dir, const ExportOptions& options);

}  // namespace lockstep
