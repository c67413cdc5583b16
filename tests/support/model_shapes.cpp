#include "support/model_shapes.hpp"

#include <stdexcept>
#include <string>

#include "support/test_util.hpp"

namespace lockstep::test {

RopeScaling llama3_scaling() {
  return RopeScaling{.factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f, .original_max_position = 64};
}

std::vector<float> parameters_for(const ModelConfig& c, uint64_t seed) {
  std::vector<float> params = init_parameters(c, seed);
  const ParameterRegistry registry(c);
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (const ParameterInfo& e : registry.entries()) {
    if (!(e.name.ends_with(".bq") || e.name.ends_with(".bk") || e.name.ends_with(".bv") || e.name.ends_with(".bo")))
      continue;
    for (int64_t i = 0; i < e.count; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      params[static_cast<size_t>(e.offset + i)] = static_cast<float>(static_cast<int64_t>(state >> 40) - (1 << 23)) * 0x1p-24f;
    }
  }
  return params;
}

std::vector<Shape> shapes() {
  std::vector<Shape> out;
  out.push_back({"tiny", test::tiny_config(24)});
  out.push_back({"gqa", test::tiny_gqa_config(24)});
  ModelConfig odd;  // nothing a multiple of the vector width
  odd.vocab_size = 37;
  odd.length = 23;
  odd.d_model = 30;
  odd.n_layers = 2;
  odd.n_heads = 5;  // head_dim 6
  odd.n_kv_heads = 1;
  odd.d_ff = 17;
  odd.batch = 2;
  out.push_back({"odd", odd});
  ModelConfig wide;  // head_dim 34 and a vocab past one panel
  wide.vocab_size = 300;
  wide.length = 40;
  wide.d_model = 68;
  wide.n_layers = 1;
  wide.n_heads = 2;
  wide.n_kv_heads = 2;
  wide.d_ff = 50;
  wide.batch = 2;
  out.push_back({"wide", wide});
  // Llama 3 RoPE scaling, GQA, head_dim 16.
  const ModelConfig llama3{.vocab_size = 45, .length = 26, .d_model = 48, .n_layers = 2, .n_heads = 3,
                           .n_kv_heads = 1, .d_ff = 40, .batch = 2, .rope_scaling = llama3_scaling()};
  out.push_back({"llama3", llama3});
  ModelConfig qwen2 = odd;  // biases on q, k and v (Qwen2), and on o (Llama's attention_bias)
  qwen2.n_kv_heads = 5;
  qwen2.qkv_bias = true;
  out.push_back({"qwen2", qwen2});
  ModelConfig biased = test::tiny_gqa_config(24);
  biased.qkv_bias = true;
  biased.o_bias = true;
  biased.rope_scaling = llama3_scaling();
  out.push_back({"biased", biased});
  // LOCKSTEP_TEST_SHAPES (names, comma-separated) keeps only those shapes: the Arm stage of
  // ./run runs "odd" alone under qemu to fit its time. Unset: every shape.
  if (const char* only = std::getenv("LOCKSTEP_TEST_SHAPES")) {
    const std::string names = std::string(",") + only + ",";
    std::erase_if(out, [&](const Shape& s) { return names.find(std::string(",") + s.name + ",") == std::string::npos; });
    if (out.empty()) throw std::runtime_error(std::string("LOCKSTEP_TEST_SHAPES names no shape: ") + only);
  }
  return out;
}

}  // namespace lockstep::test
