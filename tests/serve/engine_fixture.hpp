// What the GenerationEngine tests share: a tiny model and the sampling they generate with.
#pragma once

#include <cstdint>
#include <memory>

#include "lockstep/config.hpp"
#include "lockstep/generator.hpp"
#include "lockstep/model.hpp"

namespace lockstep::serve::test {

// d_model 16, 2 layers, 2 heads, d_ff 32, a 32-token window, parameters from seed 7.
inline std::shared_ptr<const Model> tiny_model() {
  ModelConfig c;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_ff = 32;
  c.length = 32;
  return Model::from_parameters(c, init_parameters(c, 7));
}

// Temperature 0.9, top-k 40, `tokens` tokens.
inline GenerateOptions options(uint64_t seed, int32_t tokens) {
  GenerateOptions g;
  g.sampling = {0.9f, 40, 1.0f, seed};
  g.max_tokens = tokens;
  return g;
}

}  // namespace lockstep::serve::test
