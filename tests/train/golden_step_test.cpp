// Golden values of training: the loss bits of three steps of the trainer and the SHA-256 of the
// parameters and moments after them, for a fixed model, data and options, pinned from the x86
// build. Every SIMD target and the reference device must give them, so a build for another ISA
// (README, "Running on Arm") proves its training steps give x86's bits. A change here is a new
// arithmetic profile (docs/ARITHMETIC.md, "Versions"), never a silent edit of the numbers.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "lockstep/model.hpp"
#include "lockstep/trainer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

struct GoldenSteps {
  Precision precision;
  uint32_t losses[3];             // train_step's loss bits, steps 1 to 3
  const char* parameters_sha256;  // after step 3
  const char* moments_sha256;     // of m then v, after step 3
};

const GoldenSteps kGolden[] = {
    {Precision::f32, {0x40b19634u, 0x40b0fd5bu, 0x40b15a49u},
     "95ff0a14a3025d800b257ed9e4c07ab8b31011143560feae8bb1832c85749815",
     "2168d3dc36acdc0e090cce1096985dc2fe2911cd421f807b7fe64b7728868731"},
    {Precision::bf16, {0x40b196aeu, 0x40b0fd6eu, 0x40b15a60u},
     "fa7df67b775018da9d96fe2961affc94b790621a7151ca6508dcdcc31878d281",
     "f849afb5f375ac863d888e91c26195a07f8cc77df85baceb4597264090c77c1d"},
};

// The grouped-query tiny model (d 16, 2 layers), 9 positions, batch of test::tiny_gqa_config.
TEST(GoldenStep, ThreeTrainingStepsArePinnedOnEveryDeviceAndTarget) {
  const ModelConfig c = test::tiny_gqa_config(9);
  const auto params = init_parameters(c, 5);
  std::vector<std::string> devices = {"reference"};
  for (const std::string& t : simd_targets()) devices.push_back(t);
  for (const GoldenSteps& g : kGolden) {
    for (const std::string& device : devices) {
      TrainerOptions o;
      o.device = device == "reference" ? Device::reference : Device::cpu;
      o.threads = 2;
      if (device != "reference") o.simd_target = device;
      o.precision = g.precision;
      o.ema_decay = 0.99f;
      o.adamw.clip_norm = 0.5f;
      Trainer trainer(c, params, o);
      const std::string what = device + " " + precision_name(g.precision);
      for (int step = 0; step < 3; ++step) {
        const auto ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 300 + static_cast<uint64_t>(step));
        EXPECT_EQ(trainer.train_step({ids.data(), c.batch, c.length + 1}), g.losses[step])
            << what << " step " << step + 1;
      }
      std::vector<float> moments(trainer.m().begin(), trainer.m().end());
      moments.insert(moments.end(), trainer.v().begin(), trainer.v().end());
      EXPECT_EQ(test::sha256_of(trainer.parameters()), g.parameters_sha256) << what;
      EXPECT_EQ(test::sha256_of(moments), g.moments_sha256) << what;
      std::printf("golden training steps checked on %s\n", what.c_str());
    }
  }
}

}  // namespace
}  // namespace lockstep
