// AdamW, EMA and clipping against an independent NumPy float32 implementation, bit for bit; the
// trainer's failure semantics; state round trips.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "lockstep/trainer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

void dump(const test::TempDir& dir, const std::string& name, std::span<const float> v) {
  test::write_file(dir / name, std::string(reinterpret_cast<const char*>(v.data()), v.size_bytes()));
}

TEST(Optimizer, AdamWEmaAndClippingEqualNumPyBitForBit) {
  const ModelConfig c = test::tiny_config(8);
  for (const float clip : {0.0f, 0.05f}) {
    TrainerOptions o;
    o.device = Device::cpu;
    o.threads = 2;
    o.ema_decay = 0.95f;
    o.adamw = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, clip};
    Trainer trainer(c, init_parameters(c, 1), o);
    for (int step = 1; step <= 3; ++step) {
      test::TempDir dir;
      dump(dir, "p0", trainer.parameters());
      dump(dir, "m0", trainer.m());
      dump(dir, "v0", trainer.v());
      dump(dir, "ema0", trainer.ema());
      const auto ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, static_cast<uint64_t>(step));
      trainer.train_step({ids.data(), c.batch, c.length + 1});
      dump(dir, "grad", trainer.gradient());
      dump(dir, "p1", trainer.parameters());
      dump(dir, "m1", trainer.m());
      dump(dir, "v1", trainer.v());
      dump(dir, "ema1", trainer.ema());
      const auto r = test::run_command({LOCKSTEP_PYTHON, std::string(LOCKSTEP_SOURCE_DIR) + "/tests/train/optimizer_numpy.py",
                                        dir.path(), std::to_string(step), "3e-3", "0.9", "0.95", "1e-8", "0.1",
                                        std::to_string(clip), "0.95"});
      EXPECT_EQ(r.status, 0) << r.out << r.err;
      std::printf("%s", r.out.c_str());
    }
  }
}

TEST(Trainer, AFailedStepMovesNothingAndClearsTheGradient) {
  const ModelConfig c = test::tiny_config(8);
  TrainerOptions o;
  o.ema_decay = 0.9f;
  Trainer trainer(c, init_parameters(c, 2), o);
  auto ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 3);
  trainer.train_step({ids.data(), c.batch, c.length + 1});
  ASSERT_FALSE(trainer.gradient().empty());
  const TrainerState before = trainer.state();
  ids[4] = 999;  // a bad id
  EXPECT_THROW(trainer.train_step({ids.data(), c.batch, c.length + 1}), Error);
  EXPECT_TRUE(trainer.gradient().empty());
  EXPECT_TRUE(test::same_bits(trainer.parameters(), before.parameters));
  EXPECT_TRUE(test::same_bits(trainer.m(), before.m));
  EXPECT_TRUE(test::same_bits(trainer.v(), before.v));
  EXPECT_TRUE(test::same_bits(trainer.ema(), before.ema));
  EXPECT_EQ(trainer.completed_steps(), 1);
  ids[4] = 1;
  EXPECT_THROW(trainer.train_step({ids.data(), c.batch, c.length}), Error);  // wrong shape
  EXPECT_THROW(trainer.train_step({ids.data(), c.batch, c.length + 1}, -1.0f), Error);  // bad lr
  EXPECT_EQ(trainer.completed_steps(), 1);
  // A forward that overflows: the loss is not finite, the step is refused, nothing moves.
  TrainerState blown = trainer.state();
  const ParameterRegistry reg(c);
  for (int64_t i = 0; i < c.d_model; ++i) blown.parameters[static_cast<size_t>(reg.final_norm() + i)] = 3e38f;
  Trainer overflow = Trainer::from_state(c, blown, o);
  try {
    overflow.train_step({ids.data(), c.batch, c.length + 1});
    FAIL() << "an overflowing step was applied";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not finite"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(test::same_bits(overflow.parameters(), blown.parameters));
  EXPECT_EQ(overflow.completed_steps(), 1);
  EXPECT_TRUE(overflow.gradient().empty());
}

TEST(Trainer, ResumingFromStateGivesTheSameBitsAsContinuing) {
  const ModelConfig c = test::tiny_gqa_config(8);
  TrainerOptions o;
  o.ema_decay = 0.99f;
  o.threads = 2;
  Trainer straight(c, init_parameters(c, 4), o);
  std::vector<std::vector<int32_t>> batches;
  for (int s = 0; s < 4; ++s) batches.push_back(test::random_ids(c.batch * (c.length + 1), c.vocab_size, 50 + static_cast<uint64_t>(s)));
  for (int s = 0; s < 2; ++s) straight.train_step({batches[static_cast<size_t>(s)].data(), c.batch, c.length + 1});
  Trainer resumed = Trainer::from_state(c, straight.state(), o);
  for (int s = 2; s < 4; ++s) {
    const uint32_t a = straight.train_step({batches[static_cast<size_t>(s)].data(), c.batch, c.length + 1});
    const uint32_t b = resumed.train_step({batches[static_cast<size_t>(s)].data(), c.batch, c.length + 1});
    EXPECT_EQ(a, b);
  }
  EXPECT_EQ(straight.parameters_sha256(), resumed.parameters_sha256());
  EXPECT_TRUE(test::same_bits(straight.m(), resumed.m()));
  EXPECT_TRUE(test::same_bits(straight.ema(), resumed.ema()));
  EXPECT_EQ(resumed.completed_steps(), 4);
}

TEST(Trainer, FrozenParametersNeverMove) {
  const ModelConfig c = test::tiny_config(8);
  TrainerOptions o;
  o.frozen = {"embed", "layers.1.w_up"};
  o.ema_decay = 0.5f;
  const auto params = init_parameters(c, 6);
  Trainer trainer(c, params, o);
  for (int s = 0; s < 3; ++s) {
    const auto ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 70 + static_cast<uint64_t>(s));
    trainer.train_step({ids.data(), c.batch, c.length + 1});
  }
  const ParameterRegistry reg(c);
  for (const char* name : {"embed", "layers.1.w_up"}) {
    const auto& e = reg.at(name);
    EXPECT_TRUE(test::same_bits(trainer.parameters().subspan(static_cast<size_t>(e.offset), static_cast<size_t>(e.count)),
                                std::span<const float>(params).subspan(static_cast<size_t>(e.offset), static_cast<size_t>(e.count))))
        << name;
    EXPECT_TRUE(test::same_bits(trainer.ema().subspan(static_cast<size_t>(e.offset), static_cast<size_t>(e.count)),
                                std::span<const float>(params).subspan(static_cast<size_t>(e.offset), static_cast<size_t>(e.count))))
        << name;
  }
  const auto& wq = reg.at("layers.0.wq");
  EXPECT_FALSE(test::same_bits(trainer.parameters().subspan(static_cast<size_t>(wq.offset), static_cast<size_t>(wq.count)),
                               std::span<const float>(params).subspan(static_cast<size_t>(wq.offset), static_cast<size_t>(wq.count))));
  TrainerOptions bad = o;
  bad.frozen = {"nope"};
  EXPECT_THROW(Trainer(c, params, bad), Error);
}

TEST(Trainer, OptionsAreValidated) {
  const ModelConfig c = test::tiny_config(8);
  const auto params = init_parameters(c, 1);
  auto refused = [&](auto edit) {
    TrainerOptions o;
    edit(o);
    try {
      Trainer t(c, params, o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refused([](TrainerOptions& o) { o.adamw.lr = 0.0f; }).find("lr = "), std::string::npos);
  EXPECT_NE(refused([](TrainerOptions& o) { o.adamw.beta2 = 1.0f; }).find("beta2"), std::string::npos);
  EXPECT_NE(refused([](TrainerOptions& o) { o.adamw.eps = -1.0f; }).find("eps"), std::string::npos);
  EXPECT_NE(refused([](TrainerOptions& o) { o.ema_decay = 1.0f; }).find("ema decay"), std::string::npos);
  EXPECT_NE(refused([](TrainerOptions& o) { o.threads = 2000; }).find("threads"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
