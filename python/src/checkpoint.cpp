#include "checkpoint.hpp"

#include <string>
#include <vector>

#include "format/model_json.hpp"
#include "lockstep/error.hpp"
#include "lockstep/training_run.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/run.hpp"

namespace lockstep::python {
namespace {

std::string config_text(const ModelConfig& c) {
  return "vocab_size " + std::to_string(c.vocab_size) + ", length " + std::to_string(c.length) + ", d_model " +
         std::to_string(c.d_model) + ", n_layers " + std::to_string(c.n_layers) + ", n_heads " +
         std::to_string(c.n_heads) + ", n_kv_heads " + std::to_string(c.n_kv_heads) + ", d_ff " +
         std::to_string(c.d_ff) + ", norm_eps " + std::to_string(c.norm_eps) + ", rope_theta " +
         std::to_string(c.rope_theta) + ", batch " + std::to_string(c.batch);
}

}  // namespace

std::string save_checkpoint(const std::string& location, const std::string& run_file, const Trainer& trainer,
                            Precision precision) {
  const RunSpec run = read_run_file(run_file);
  const std::string head = "cannot write a checkpoint of this trainer for " + run_file + ": ";
  if (run.model != trainer.config())
    throw Error(ErrorKind::invalid_argument, head + "its model configuration (" + config_text(run.model) +
                                                 ") is not the trainer's (" + config_text(trainer.config()) + ")");
  if (run.precision != precision)
    throw Error(ErrorKind::invalid_argument, head + "it sets :precision " + precision_name(run.precision) +
                                                 ", the trainer computes in " + precision_name(precision));
  if (run.ema != 0.0f)
    throw Error(ErrorKind::invalid_argument,
                head + "it sets :ema, and this trainer keeps no averages to write (remove :ema)");
  if (!run.load.empty())
    throw Error(ErrorKind::invalid_argument, head + "it freezes '" + run.load.front().parameter +
                                                 "' with :load, and this trainer freezes nothing (remove :load)");
  // The data files as a run records them (paths as the run file names them, sizes, SHA-256s):
  // resuming refuses other data. Read before anything is written.
  const train::TrainingData data(run.data, run.held_out_ppm, run.model);
  train::make_directories(location);
  const train::DirectoryLock lock(location);  // not while a training run writes there
  const std::vector<format::LoadedTensor> loaded;
  return train::write_checkpoint(location, {run, trainer, loaded, data.files()});
}

}  // namespace lockstep::python
