// The sampling flags `generate` and `chat` share: one set of names, defaults and parsing, so
// that the same flags sample the same tokens in both (and as the HTTP API's fields do).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "lockstep/generator.hpp"

namespace lockstep::cli {

// A decimal (or "inf", "nan") rounded once to the nearest f32, as examples/sample.py rounds it
// (lockstep.sampling.f32_from_text), so that both sample with the same bits for any text.
// Throws Error naming `flag`.
float f32_from_text(const std::string& text, const char* flag);

struct SamplingFlags {
  int32_t tokens = 64;
  std::string temperature = "0", top_p = "1";  // parsed by f32_from_text
  int32_t top_k = 0;
  uint64_t seed = 0;
  bool ignore_eos = false;
  // -n/--tokens, --temperature, --top-k, --top-p, --seed, --ignore-eos.
  void add_to(CLI::App& cmd);
  // The options they give (truncate_prompt true, no stop string); throws Error naming a flag.
  GenerateOptions options() const;
};

}  // namespace lockstep::cli
