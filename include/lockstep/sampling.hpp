// Choosing the next token from logits, deterministically: the same logits, options, seed and
// step give the same token on every machine (lockstep's own exp and its counter-based RNG; no
// std:: distributions). Since the logits themselves are the same bits on every path, so is the
// generated text.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "lockstep/model.hpp"

namespace lockstep {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy (highest logit, ties to the lowest id)
  int32_t top_k = 0;         // > 0: only the k most likely ids
  float top_p = 1.0f;        // < 1: the smallest set of most likely ids holding this much mass
  uint64_t seed = 0;
  // Throws Error naming a value out of range (temperature >= 0 finite, top_k >= 0,
  // 0 < top_p <= 1).
  void validate() const;
};

// The token for generation step `step` (0 for the first generated token). docs/ARITHMETIC.md,
// "Sampling", gives the arithmetic.
int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, int64_t step);

// What sample_token computed on its way, for twins in other languages and their tests: the
// candidates in order, their f32 weights, the f64 total (after top-p) and the draw's target.
// Empty at temperature 0 (the greedy choice computes nothing).
struct SampleTrace {
  std::vector<int32_t> candidates;
  std::vector<float> weights;
  double total = 0.0;
  double target = 0.0;
};
int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, int64_t step, SampleTrace* trace);

}  // namespace lockstep
