// The trainer: the training forward's loss equals inference's, the fast step equals the reference
// step bit for bit (gradient, parameters, moments after several steps) on every SIMD target and
// thread count, and a failed step moves nothing.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "lockstep/model.hpp"
#include "lockstep/trainer.hpp"
#include "support/test_util.hpp"
#include "train/reference_step.hpp"

namespace lockstep {
namespace {

std::vector<int32_t> batch_ids(const ModelConfig& c, uint64_t seed, bool ignore_some = true) {
  auto ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, seed);
  if (ignore_some) ids[static_cast<size_t>(c.length)] = -100;  // row 0's last target
  return ids;
}

ModelConfig odd_config() {
  ModelConfig c;
  c.vocab_size = 37;
  c.length = 11;
  c.d_model = 30;
  c.n_layers = 2;
  c.n_heads = 5;
  c.n_kv_heads = 1;
  c.d_ff = 17;
  c.batch = 3;
  return c;
}

TEST(TrainingForward, LossEqualsTheInferenceLoss) {
  for (const ModelConfig& c : {test::tiny_config(12), test::tiny_gqa_config(9), odd_config()}) {
    const auto params = init_parameters(c, 3);
    const auto ids = batch_ids(c, 4);
    const auto model = Model::from_parameters(c, params);
    const train::RopeTables<float> rope(c);
    for (bool bf16 : {false, true}) {
      ModelOptions mo;
      mo.precision = bf16 ? Precision::bf16 : Precision::f32;
      const auto m = Model::from_parameters(c, params, mo);
      const float loss = train::reference_loss_and_gradient<float>(c, rope, params.data(), ids.data(), c.batch, nullptr, bf16);
      EXPECT_EQ(std::bit_cast<uint32_t>(loss), m->loss_bits({ids.data(), c.batch, c.length + 1}, {Device::reference, {}}))
          << "bf16 " << bf16;
    }
  }
}

// Three steps of the fast trainer against the reference trainer, bit for bit, on every SIMD
// target, thread count and precision.
void expect_fast_steps_equal_reference(const ModelConfig& c) {
  const auto params = init_parameters(c, 5);
  for (const Precision precision : {Precision::f32, Precision::bf16}) {
    TrainerOptions ro;
    ro.device = Device::reference;
    ro.precision = precision;
    ro.ema_decay = 0.99f;
    ro.adamw.clip_norm = 0.5f;
    Trainer reference(c, params, ro);
    std::vector<uint32_t> losses;
    for (int step = 0; step < 3; ++step) {
      const auto ids = batch_ids(c, 100 + static_cast<uint64_t>(step));
      losses.push_back(reference.train_step({ids.data(), c.batch, c.length + 1}));
    }
    for (const std::string& target : simd_targets()) {
      for (int threads : {1, 2, 3, 7}) {
        TrainerOptions fo = ro;
        fo.device = Device::cpu;
        fo.threads = threads;
        fo.simd_target = target;
        Trainer fast(c, params, fo);
        const std::string what = target + " threads " + std::to_string(threads) + " " + precision_name(precision);
        for (int step = 0; step < 3; ++step) {
          const auto ids = batch_ids(c, 100 + static_cast<uint64_t>(step));
          ASSERT_EQ(fast.train_step({ids.data(), c.batch, c.length + 1}), losses[static_cast<size_t>(step)]) << what;
        }
        EXPECT_TRUE(test::same_bits(fast.gradient(), reference.gradient())) << what << " gradient";
        EXPECT_TRUE(test::same_bits(fast.parameters(), reference.parameters())) << what << " parameters";
        EXPECT_TRUE(test::same_bits(fast.m(), reference.m())) << what << " m";
        EXPECT_TRUE(test::same_bits(fast.v(), reference.v())) << what << " v";
        EXPECT_TRUE(test::same_bits(fast.ema(), reference.ema())) << what << " ema";
      }
    }
  }
}

TEST(FastStep, GradientAndStepsEqualTheReferenceOnEveryTargetAndThreadCount) {
  for (const ModelConfig& c : {test::tiny_config(12), test::tiny_gqa_config(9), odd_config()})
    expect_fast_steps_equal_reference(c);
}

// Enough rows (3 x 67 = 201, not a multiple of a chunk or a row tile) for the fast step to hand
// several row chunks and attention items to each worker, in an order that varies run to run:
// the dynamic schedule and the alternating dy buffers must not change a bit.
TEST(FastStep, ManyRowChunksEqualTheReferenceOnEveryThreadCount) {
  ModelConfig c = odd_config();
  c.length = 67;
  expect_fast_steps_equal_reference(c);
}

TEST(Trainer, RefusesModelsWithBiasesOrRopeScalingNamingThem) {
  // Their backward is not written yet: the refusal names what the model has.
  struct Case {
    bool qkv, o, scaled;
    const char* needle;
  };
  for (const Case& k : {Case{true, false, false, "biases on q, k and v (qkv_bias)"},
                        Case{false, true, false, "a bias on the attention output (o_bias)"},
                        Case{false, false, true, "Llama 3 RoPE scaling (rope_scaling)"}}) {
    ModelConfig c = odd_config();
    c.qkv_bias = k.qkv;
    c.o_bias = k.o;
    if (k.scaled) c.rope_scaling = RopeScaling{};
    const auto params = init_parameters(c, 1);
    try {
      Trainer trainer(c, params, TrainerOptions{});
      ADD_FAILURE() << "trained " << k.needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::unsupported);
      EXPECT_NE(std::string(e.what()).find(k.needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("the trainer cannot train this model"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace lockstep
