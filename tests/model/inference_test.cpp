// The inference API's behaviour on both devices: ragged rows, the loss layout with -100, greedy
// choice, and every validation rule (spec documents 003 and 004).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/fpenv.hpp"
#include "kernels/ref/ops.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

std::shared_ptr<const Model> tiny_model(const ModelConfig& c, uint64_t seed = 7) {
  return Model::from_parameters(c, init_parameters(c, seed));
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

class BothDevices : public ::testing::TestWithParam<Device> {};
INSTANTIATE_TEST_SUITE_P(Inference, BothDevices, ::testing::Values(Device::reference, Device::cpu),
                         [](const auto& info) { return std::string(device_name(info.param)); });

TEST_P(BothDevices, RaggedRowsEqualEachRowAloneAndPaddingIsPositiveZero) {
  for (const ModelConfig& c : {test::tiny_config(), test::tiny_gqa_config()}) {
    const auto model = tiny_model(c);
    const CallOptions call{GetParam(), std::nullopt};
    const int64_t B = 4, T = 16;
    auto ids = test::random_ids(B * T, c.vocab_size, 3);
    const std::vector<int32_t> lengths = {5, 16, 1, 9};
    for (int64_t b = 0; b < B; ++b)  // padding ids are never read, whatever they are
      for (int64_t t = lengths[static_cast<size_t>(b)]; t < T; ++t) ids[static_cast<size_t>(b * T + t)] = (t % 2) ? -7 : 100000;
    const auto batch = model->logits({ids.data(), B, T}, lengths, call);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = lengths[static_cast<size_t>(b)];
      const auto alone = model->logits({ids.data() + b * T, 1, L}, {}, call);
      const float* row = batch.data() + b * T * c.vocab_size;
      EXPECT_EQ(std::memcmp(row, alone.data(), alone.size() * sizeof(float)), 0) << "row " << b;
      for (int64_t i = L * c.vocab_size; i < T * c.vocab_size; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(row[i]), 0u) << "padding of row " << b;
    }
    const auto hidden = model->hidden({ids.data(), B, T}, lengths, call);
    const auto hidden_alone = model->hidden({ids.data() + T, 1, 16}, {}, call);
    EXPECT_EQ(std::memcmp(hidden.data() + T * c.d_model, hidden_alone.data(), hidden_alone.size() * 4), 0);
  }
}

TEST_P(BothDevices, PrefixesOfARowHaveThePrefixesBits) {
  // Position t's output depends on positions <= t only: a shorter call gives the same bits.
  const ModelConfig c = test::tiny_config();
  const auto model = tiny_model(c);
  const CallOptions call{GetParam(), std::nullopt};
  const auto ids = test::random_ids(16, c.vocab_size, 9);
  const auto full = model->logits({ids.data(), 1, 16}, {}, call);
  for (int64_t T : {1, 2, 7, 15}) {
    const auto part = model->logits({ids.data(), 1, T}, {}, call);
    EXPECT_EQ(std::memcmp(part.data(), full.data(), part.size() * 4), 0) << "T=" << T;
  }
}

TEST_P(BothDevices, LossIgnoresMinus100AndIsTheMeanOfThePositions) {
  const ModelConfig c = test::tiny_config();
  const auto model = tiny_model(c);
  const CallOptions call{GetParam(), std::nullopt};
  const int64_t B = c.batch, W = c.length + 1;
  auto ids = test::random_ids(B * W, c.vocab_size, 11);
  ids[static_cast<size_t>(0 * W + c.length)] = -100;
  ids[static_cast<size_t>(2 * W + c.length)] = -100;
  const uint32_t bits = model->loss_bits({ids.data(), B, W}, call);
  // The same mean, recomputed from the logits in the stated order.
  std::vector<int32_t> inputs;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < c.length; ++t) inputs.push_back(ids[static_cast<size_t>(b * W + t)]);
  const auto logits = model->logits({inputs.data(), B, c.length}, {}, call);
  float total = 0.0f;
  int count = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < c.length; ++t) {
      const int32_t target = ids[static_cast<size_t>(b * W + t + 1)];
      if (target == -100) continue;
      total = total + ref::cross_entropy(logits.data() + (b * c.length + t) * c.vocab_size, c.vocab_size, target);
      ++count;
    }
  }
  EXPECT_EQ(count, B * c.length - 2);
  EXPECT_EQ(bits, std::bit_cast<uint32_t>(total / static_cast<float>(count)));
  EXPECT_EQ(std::bit_cast<uint32_t>(model->loss({ids.data(), B, W}, call)), bits);
  EXPECT_GT(std::bit_cast<float>(bits), 4.0f);  // near log(256) for a fresh model
}

TEST_P(BothDevices, NextBytesIsTheGreedyChoiceAtEachRowsLastRealPosition) {
  const ModelConfig c = test::tiny_gqa_config();
  const auto model = tiny_model(c);
  const CallOptions call{GetParam(), std::nullopt};
  const auto ids = test::random_ids(3 * 10, c.vocab_size, 13);
  const std::vector<int32_t> lengths = {10, 4, 1};
  const auto next = model->next_bytes({ids.data(), 3, 10}, lengths, call);
  const auto logits = model->logits({ids.data(), 3, 10}, lengths, call);
  for (int b = 0; b < 3; ++b) {
    const float* last = logits.data() + (b * 10 + lengths[static_cast<size_t>(b)] - 1) * c.vocab_size;
    EXPECT_EQ(next[static_cast<size_t>(b)], greedy_choice({last, static_cast<size_t>(c.vocab_size)}));
  }
}

TEST(Greedy, TiesGoToTheLowestIdAndNaNIsNeverChosen) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(greedy_choice(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}), 1);
  EXPECT_EQ(greedy_choice(std::vector<float>{nan, 1.0f, nan, 1.0f}), 1);
  EXPECT_EQ(greedy_choice(std::vector<float>{nan, -5.0f}), 1);
  EXPECT_EQ(greedy_choice(std::vector<float>{-0.0f, 0.0f}), 0);  // equal values: the first
  EXPECT_EQ(greedy_choice(std::vector<float>{-std::numeric_limits<float>::infinity(), nan}), 0);
  EXPECT_NE(error_of([&] { greedy_choice(std::vector<float>{nan, nan}); }).find("every logit is NaN"),
            std::string::npos);
}

TEST(Validation, BadIdsShapesLengthsAndThreadsAreRefusedClearly) {
  const ModelConfig c = test::tiny_config();
  const auto model = tiny_model(c);
  auto ids = test::random_ids(2 * 8, c.vocab_size, 1);
  ids[11] = 256;
  EXPECT_EQ(error_of([&] { model->logits({ids.data(), 2, 8}); }),
            "ids must be byte values in [0, 256); got 256 at row 1, position 3");
  ids[11] = -1;
  EXPECT_EQ(error_of([&] { model->next_bytes({ids.data(), 2, 8}); }),
            "ids must be byte values in [0, 256); got -1 at row 1, position 3");
  ids[11] = 0;
  EXPECT_NE(error_of([&] { model->logits({ids.data(), 0, 8}); }).find("ids must be [batch, 1..16]"), std::string::npos);
  std::vector<int32_t> long_ids(17, 1);
  EXPECT_NE(error_of([&] { model->logits({long_ids.data(), 1, 17}); }).find("got [1, 17]"), std::string::npos);
  EXPECT_NE(error_of([&] { model->logits({ids.data(), 2, 8}, std::vector<int32_t>{3}); }).find("one length per row"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model->logits({ids.data(), 2, 8}, std::vector<int32_t>{3, 9}); }).find("lengths[1] = 9"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model->logits({ids.data(), 2, 8}, std::vector<int32_t>{0, 2}); }).find("lengths[0] = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model->logits({ids.data(), 2, 8}, {}, {Device::cpu, 0}); }).find("threads must be in [1, 1024]"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model->logits({ids.data(), 2, 8}, {}, {Device::cpu, 1025}); }).find("threads must be in"),
            std::string::npos);
  // loss: [batch, length + 1], -100 only in the last column.
  auto loss_ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 2);
  EXPECT_NE(error_of([&] { model->loss_bits({loss_ids.data(), c.batch, c.length}); }).find("ids must be [3, 17]"),
            std::string::npos);
  loss_ids[5] = -100;
  EXPECT_EQ(error_of([&] { model->loss_bits({loss_ids.data(), c.batch, c.length + 1}); }),
            "ids must be byte values in [0, 256); got -100 at row 0, position 5");
  // Parameters: the count and finiteness.
  std::vector<float> params = init_parameters(c, 1);
  params.pop_back();
  EXPECT_NE(error_of([&] { Model::from_parameters(c, params); }).find("parameters must be float32"), std::string::npos);
  params = init_parameters(c, 1);
  params[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_NE(error_of([&] { Model::from_parameters(c, params); }).find("parameters must be finite; element 3"),
            std::string::npos);
  ModelConfig bad = c;
  bad.n_heads = 3;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("d_model = 16 is not a multiple of n_heads = 3"), std::string::npos);
}

TEST(FloatEnvironment, AHostsFlushToZeroNeitherChangesABitNorIsLeftChanged) {
  // A host built with fast-math runs with flush-to-zero and denormals-are-zero on; the model sets
  // the profile's environment on every thread it computes on and gives the host's back.
  ModelConfig c = test::tiny_config(16);
  auto params = init_parameters(c, 30);
  for (float& v : params) v *= 1e-19f;  // activations deep in the subnormal range
  for (int64_t i = 0; i < c.d_model; ++i) params[static_cast<size_t>(ParameterRegistry(c).final_norm() + i)] = 1.0f;
  const auto model = Model::from_parameters(c, params);
  const auto ids = test::random_ids(16, 256, 31);
  const auto want = model->logits({ids.data(), 1, 16}, {}, {Device::cpu, 2});
  const uint64_t original = float_env_bits();
  float_env_set_fast_math_for_test();
  const uint64_t fast = float_env_bits();
  const auto got = model->logits({ids.data(), 1, 16}, {}, {Device::cpu, 2});
  const auto got_ref = model->logits({ids.data(), 1, 16}, {}, {Device::reference, std::nullopt});
  EXPECT_EQ(float_env_bits(), fast) << "the caller's environment was not restored";
  float_env_restore_for_test(original);
  EXPECT_TRUE(test::same_bits(got, want));
  EXPECT_TRUE(test::same_bits(got_ref, want));
  bool subnormal = false;
  for (float v : want) subnormal |= v != 0.0f && std::fabs(v) < 1.17549435e-38f;
  EXPECT_TRUE(subnormal) << "the check needs subnormal logits to mean anything";
}

TEST(Registry, FlatAndNamedConvertBothWays) {
  const ModelConfig c = test::tiny_gqa_config();
  const ParameterRegistry reg(c);
  const auto flat = init_parameters(c, 4);
  ASSERT_EQ(static_cast<int64_t>(flat.size()), reg.total());
  auto named = to_named(reg, flat);
  EXPECT_EQ(named.front().name, "embed");
  EXPECT_EQ(named.back().name, "head");
  EXPECT_EQ(reg.at("layers.1.wk").shape, (std::vector<int64_t>{24, 12}));
  std::reverse(named.begin(), named.end());  // any order
  EXPECT_TRUE(test::same_bits(from_named(reg, named), flat));
  named.pop_back();
  EXPECT_NE(error_of([&] { from_named(reg, named); }).find("missing ['embed']"), std::string::npos);
  named.push_back({"extra", {1}, {0.0f}});
  EXPECT_NE(error_of([&] { from_named(reg, named); }).find("unknown ['extra']"), std::string::npos);
}

TEST(Init, IsDeterministicAndScaled) {
  const ModelConfig c = test::tiny_config();
  const auto a = init_parameters(c, 42), b = init_parameters(c, 42), d = init_parameters(c, 43);
  EXPECT_TRUE(test::same_bits(a, b));
  EXPECT_FALSE(test::same_bits(a, d));
  const ParameterRegistry reg(c);
  const auto& wq = reg.at("layers.0.wq");
  double sq = 0;
  for (int64_t i = 0; i < wq.count; ++i) sq += a[static_cast<size_t>(wq.offset + i)] * a[static_cast<size_t>(wq.offset + i)];
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(wq.count)), 0.02, 0.004);
  EXPECT_EQ(a[static_cast<size_t>(reg.at("final_norm").offset)], 1.0f);
}

}  // namespace
}  // namespace lockstep
