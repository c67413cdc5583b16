// A run file's frozen `:load` parameters, read and compared with what a checkpoint recorded. Resume
// and export both refuse a checkpoint whose :load set is not the run file's, with one message.
#pragma once

#include <string>
#include <vector>

#include "format/model_json.hpp"
#include "lockstep/config.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep::train {

struct FrozenLoads {
  std::vector<format::LoadedTensor> recorded;  // name, file, tensor and the file's SHA-256
  std::vector<std::vector<float>> values;      // each in its parameter's shape
};

// Reads every `:load` of `run` (shapes from `registry`). Error naming the parameter and the file.
FrozenLoads read_frozen_loads(const RunSpec& run, const ParameterRegistry& registry);

// Throws Error(invalid_argument) "HEAD the :load parameters differ: ... there, ... here" unless
// `there` (a checkpoint's record) and `here` (the run file's, as read now) name the same
// parameters from the same files and tensors with the same SHA-256s, in order.
void check_same_loads(const std::vector<format::LoadedTensor>& there,
                      const std::vector<format::LoadedTensor>& here, const std::string& head);

}  // namespace lockstep::train
