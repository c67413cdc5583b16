// LanguageModelHostTrainer.save_checkpoint: a Python trainer's state as a checkpoint step
// directory that `lockstep train --resume`, `export`, `serve` and from_checkpoint read.
#pragma once

#include <string>

#include "lockstep/config.hpp"
#include "lockstep/trainer.hpp"

namespace lockstep::python {

// Writes LOCATION/step-<completed steps> (LOCATION and its parents created when missing) with
// train/checkpoint.cpp's writer, the one training uses, for the run file at `run_file`: its copy,
// its data files' sizes and SHA-256s and its slug go into the checkpoint, so resuming checks them
// as for any checkpoint. Refused (Error, nothing written) unless the run file's model
// configuration and :precision are the trainer's, and when it sets :ema or :load (this trainer
// keeps no averages and freezes nothing). Returns the step directory's path. Call without the GIL.
std::string save_checkpoint(const std::string& location, const std::string& run_file, const Trainer& trainer,
                            Precision precision);

}  // namespace lockstep::python
