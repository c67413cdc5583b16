// The model shapes the whole-forward exactness tests run (the fast path's and the CUDA path's
// against the reference): odd widths, GQA, a vocabulary past one panel, Llama 3's RoPE scaling
// and the attention biases. LOCKSTEP_TEST_SHAPES (names, comma-separated) keeps only those.
#pragma once

#include <cstdint>
#include <vector>

#include "lockstep/config.hpp"

namespace lockstep::test {

struct Shape {
  const char* name;
  ModelConfig config;
};

// Llama 3 scaling whose frequencies fall in all three of its bands (head_dim 16, theta 10^4:
// wavelengths 6.3 (kept), 19.9 and 62.8 (blended), 199 and up (divided by the factor)).
RopeScaling llama3_scaling();

// init_parameters(c, seed) with random biases (it sets them to 0), so that each add is seen.
std::vector<float> parameters_for(const ModelConfig& c, uint64_t seed);

std::vector<Shape> shapes();

}  // namespace lockstep::test
