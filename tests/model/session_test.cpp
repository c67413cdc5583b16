// Sessions: the logits after each append equal, with memcmp, the full forward pass's logits at
// that position, on both devices, several thread counts and every SIMD target; forks, truncation
// and batched appends keep that.
#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/model.hpp"
#include "lockstep/session.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

std::vector<float> full_logits_at(const Model& model, std::span<const int32_t> ids, int64_t pos) {
  const auto all = model.logits({ids.data(), 1, pos + 1}, {}, {Device::reference, std::nullopt});
  const int64_t V = model.config().vocab_size;
  return std::vector<float>(all.end() - V, all.end());
}

TEST(Session, AppendsGiveTheFullPassBitsAtEveryPosition) {
  for (const ModelConfig& c : {test::tiny_config(24), test::tiny_gqa_config(20)}) {
    const auto params = init_parameters(c, 11);
    for (const std::string& target : test::targets_under_test()) {
      for (const Precision precision : {Precision::f32, Precision::bf16}) {
        ModelOptions o;
        o.simd_target = target;
        o.precision = precision;
        const auto model = Model::from_parameters(c, params, o);
        const auto ids = test::random_ids(c.length, c.vocab_size, 5);
        for (const CallOptions call : {CallOptions{Device::cpu, 1}, CallOptions{Device::cpu, 3}, CallOptions{Device::reference, {}}}) {
          Session s(model, call);
          int64_t pos = 0;
          const int chunks[] = {1, 3, 1, 5, 2, 1, 4, 1, 1, 2, 3, 1};
          for (int chunk : chunks) {
            if (pos + chunk > c.length) break;
            const auto logits = s.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(pos), static_cast<size_t>(chunk)));
            pos += chunk;
            ASSERT_TRUE(test::same_bits(logits, full_logits_at(*model, ids, pos - 1)))
                << target << " " << precision_name(precision) << " " << device_name(*call.device) << " at " << pos;
          }
          EXPECT_EQ(s.length(), pos);
        }
      }
    }
  }
}

TEST(Session, ForkTruncateAndBatchedAppendsKeepTheBits) {
  const ModelConfig c = test::tiny_gqa_config(24);
  const auto model = Model::from_parameters(c, init_parameters(c, 12));
  const auto ids = test::random_ids(c.length, c.vocab_size, 6);
  Session base(model, {Device::cpu, 2});
  base.append(std::span<const int32_t>(ids).subspan(0, 10));
  Session a = base.fork();
  Session b = base.fork(6);
  EXPECT_EQ(b.length(), 6);
  auto other = ids;
  other[6] = (other[6] + 1) % c.vocab_size;
  // a continues the original; b diverges at position 6; base is rewound to 4 and regrows.
  const auto la = a.append(std::span<const int32_t>(ids).subspan(10, 2));
  EXPECT_TRUE(test::same_bits(la, full_logits_at(*model, ids, 11)));
  const auto lb = b.append(std::span<const int32_t>(other).subspan(6, 3));
  EXPECT_TRUE(test::same_bits(lb, full_logits_at(*model, other, 8)));
  base.truncate(4);
  const auto lbase = base.append(std::span<const int32_t>(other).subspan(4, 5));
  EXPECT_TRUE(test::same_bits(lbase, full_logits_at(*model, other, 8)));
  // Several sessions of different lengths in one pass, each with its own bits.
  std::vector<Session> sessions;
  std::vector<std::vector<int32_t>> texts;
  for (int i = 0; i < 5; ++i) {
    texts.push_back(test::random_ids(c.length, c.vocab_size, 100 + static_cast<uint64_t>(i)));
    sessions.emplace_back(model, CallOptions{Device::cpu, 2});
    sessions.back().append(std::span<const int32_t>(texts.back()).subspan(0, static_cast<size_t>(1 + 3 * i)));
  }
  std::vector<std::vector<float>> out(5, std::vector<float>(static_cast<size_t>(c.vocab_size)));
  std::vector<SessionStep> steps;
  for (int i = 0; i < 5; ++i)
    steps.push_back({&sessions[static_cast<size_t>(i)],
                     std::span<const int32_t>(texts[static_cast<size_t>(i)]).subspan(static_cast<size_t>(1 + 3 * i), static_cast<size_t>(1 + i % 2)),
                     out[static_cast<size_t>(i)].data(), nullptr});
  append_batch(steps, {Device::cpu, 3});
  for (int i = 0; i < 5; ++i)
    EXPECT_TRUE(test::same_bits(out[static_cast<size_t>(i)], full_logits_at(*model, texts[static_cast<size_t>(i)], 1 + 3 * i + (1 + i % 2) - 1)))
        << "session " << i;
}

TEST(Session, RefusesBadTokensAndAFullWindowWithoutChangingState) {
  const ModelConfig c = test::tiny_config(8);
  const auto model = Model::from_parameters(c, init_parameters(c, 13));
  Session s(model);
  const std::vector<int32_t> good = {1, 2, 3};
  s.append(good);
  const std::vector<int32_t> bad = {4, 300};
  EXPECT_THROW(s.append(bad), Error);
  EXPECT_EQ(s.length(), 3);
  const std::vector<int32_t> many(6, 1);
  EXPECT_THROW(s.append(many), Error);
  EXPECT_EQ(s.length(), 3);
  const std::vector<int32_t> empty;
  EXPECT_THROW(s.append(empty), Error);
  EXPECT_THROW(s.truncate(4), Error);
  EXPECT_THROW(s.fork(9), Error);
  // Still exact after the refusals.
  const std::vector<int32_t> more = {5};
  const auto logits = s.append(more);
  const std::vector<int32_t> all = {1, 2, 3, 5};
  EXPECT_TRUE(test::same_bits(logits, full_logits_at(*model, all, 3)));
}

}  // namespace
}  // namespace lockstep
