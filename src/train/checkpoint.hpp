// Checkpoints: DIR/step-<n>/, each a model directory plus what resuming needs (docs/TRAINING.md,
// "Checkpoints"). Written whole under a temporary name and renamed; every file a pure function of
// the training state and the run file, so that runs that computed the same state write the same
// bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/model_json.hpp"
#include "lockstep/trainer.hpp"
#include "lockstep/training_run.hpp"
#include "train/data.hpp"

namespace lockstep::train {

inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kRunFileCopy = "run.sx";
inline constexpr const char* kTrainingFile = "training.json";
inline constexpr const char* kTrainingFormat = "lockstep.training";
inline constexpr int kTrainingFormatVersion = 1;

struct CheckpointInput {
  const RunSpec& run;
  const Trainer& trainer;
  const std::vector<format::LoadedTensor>& loaded;  // the run's :load parameters, with SHA-256s
  const std::vector<DataFileInfo>& data;
};

// Writes LOCATION/step-<completed steps> and returns its path. Throws Error (nothing appears at
// the step's path then).
std::string write_checkpoint(const std::string& location, const CheckpointInput& in);

// A complete checkpoint read back, every file checked (SHA-256s, shapes, finiteness; :load files
// against their recorded SHA-256, LS-LOAD-001).
struct Checkpoint {
  std::string dir;
  int64_t step = 0;
  format::ModelDescription model;
  TrainerState state;  // parameters: the trained weights; ema: the averages (empty without EMA)
  std::string run_text;
  std::vector<DataFileInfo> data;
  // training.json's ema_decay as written (format::shortest_decimal of the run's :ema), the decay
  // the averages were kept with; 0 without EMA.
  double ema_decay = 0.0;
};
Checkpoint read_checkpoint(const std::string& step_dir);

// Keeps the newest `keep` complete checkpoints of `location` (0: all) and returns the steps
// removed. Each is renamed to a temporary name first, so that a kill midway never leaves a
// step directory that looks complete but is not.
std::vector<int64_t> remove_old_checkpoints(const std::string& location, int64_t keep);

// Removes what a killed writer left in `location`: temporaries of step directories and of
// metrics.jsonl.
void remove_stale_temporaries(const std::string& location);

}  // namespace lockstep::train
