// The reference logits against an independent float64 NumPy implementation of the same
// architecture (tests/model/numpy_reference.py), on random models and inputs. The tolerance is
// justified in that script.
#include <gtest/gtest.h>

#include <cmath>

#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

// Weights larger than init's, so attention patterns and the MLP are far from trivial.
std::vector<float> lively_parameters(const ModelConfig& c, uint64_t seed) {
  const ParameterRegistry reg(c);
  std::vector<float> p = test::random_floats(reg.total(), seed);
  for (const auto& e : reg.entries()) {
    const double fan_in = static_cast<double>(e.shape[0]);
    for (int64_t i = 0; i < e.count; ++i) {
      float& v = p[static_cast<size_t>(e.offset + i)];
      if (e.shape.size() == 1) {
        v = 1.0f + 0.2f * v;  // norm weights around 1
      } else if (e.name != "embed") {
        v = static_cast<float>(v * 1.5 / std::sqrt(fan_in));
      }
    }
  }
  return p;
}

TEST(NumpyCheck, ReferenceLogitsAgreeWithFloat64NumPy) {
  struct Case {
    ModelConfig config;
    uint64_t seed;
  };
  ModelConfig gqa = test::tiny_gqa_config(20);
  ModelConfig big = test::tiny_config(33);
  big.d_model = 48;
  big.n_heads = 4;
  big.n_kv_heads = 1;
  big.d_ff = 96;
  big.n_layers = 3;
  big.rope_theta = 500.0f;
  for (const Case& k : {Case{test::tiny_config(16), 1}, Case{gqa, 2}, Case{big, 3}}) {
    const ModelConfig& c = k.config;
    test::TempDir dir;
    const auto params = lively_parameters(c, k.seed);
    write_model_directory(dir / "model", c, params, {});
    const auto model = Model::load(dir / "model");
    const int64_t B = 3, T = c.length;
    const auto ids = test::random_ids(B * T, c.vocab_size, k.seed + 10);
    const std::vector<int32_t> lengths = {static_cast<int32_t>(T), 1, static_cast<int32_t>(T / 2 + 1)};
    const auto logits = model->logits({ids.data(), B, T}, lengths, {Device::reference, std::nullopt});
    test::write_file(dir / "ids.bin", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
    test::write_file(dir / "logits.bin", std::string(reinterpret_cast<const char*>(logits.data()), logits.size() * 4));
    std::vector<std::string> argv = {LOCKSTEP_PYTHON, std::string(LOCKSTEP_SOURCE_DIR) + "/tests/model/numpy_reference.py",
                                     dir / "model", dir / "ids.bin", dir / "logits.bin", std::to_string(B), std::to_string(T)};
    for (int32_t L : lengths) argv.push_back(std::to_string(L));
    const auto r = test::run_command(argv);
    EXPECT_EQ(r.status, 0) << r.out << r.err;
    std::printf("%s", r.out.c_str());
  }
}

}  // namespace
}  // namespace lockstep
