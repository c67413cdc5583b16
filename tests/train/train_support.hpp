// Helpers for the training-run tests: tiny run files over generated data, directory comparison,
// spawning the command without waiting.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "support/test_util.hpp"

namespace lockstep::test {

// `bytes` bytes of deterministic text-like data (words from a small vocabulary).
std::string text_data(int64_t bytes, uint64_t seed);

// Run-file keys and their values as written, e.g. {":steps", "30"}.
using RunKeys = std::vector<std::pair<std::string, std::string>>;

// A run file of a very small model over `data` (length 8, d-model 8, one layer, batch 2),
// 12 steps, checkpoints every 4, EMA on; `keys` replace those keys or are added.
std::string tiny_run_text(const std::string& data, const RunKeys& keys = {});

// Writes `data_bytes` of text_data to DIR/data.txt and the run file to DIR/run.sx; returns the
// run file's path.
std::string write_tiny_run(const TempDir& dir, const RunKeys& keys = {}, int64_t data_bytes = 6000);

// Every regular file under `dir` (recursively, names relative to it) and its bytes; skips
// metrics.jsonl, which holds timings.
std::map<std::string, std::string> checkpoint_files(const std::string& dir);

// Names in `dir` that are writers' temporaries (.step-...tmp-...).
std::vector<std::string> temporaries_in(const std::string& dir);

// Starts argv with stdout and stderr to /dev/null; returns the child's pid.
pid_t spawn(const std::vector<std::string>& argv);

// The loss_bits of every line of a metrics.jsonl, by step.
std::map<int64_t, std::string> metrics_loss_bits(const std::string& path);

}  // namespace lockstep::test
