// Run files: the (defrun NAME :key value ...) schema over the S-expression reader
// (docs/TRAINING.md lists every key). parse_run_file and read_run_file are public
// (lockstep/training_run.hpp).
#pragma once

#include <cstddef>

#include "lockstep/training_run.hpp"
#include "train/sexp.hpp"

namespace lockstep::train {

inline constexpr size_t kMaxRunFileBytes = size_t{1} << 20;

}  // namespace lockstep::train
