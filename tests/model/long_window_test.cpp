// The fast path over windows long enough that prefill's attention runs in several tiles of
// queries, each over several blocks of keys (kernels/simd/attention.cpp), against the reference
// with memcmp: every SIMD target, threads 1, 2, 3 and 7, ragged rows, and sessions whose appends
// start and end inside tiles (a cached prefix).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lockstep/model.hpp"
#include "lockstep/session.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

ModelConfig long_config(int32_t d_model, int32_t n_kv_heads) {
  ModelConfig c;
  c.vocab_size = 64;
  c.length = 300;
  c.d_model = d_model;  // two heads: head_dim 32 (s256's) or 64 (l768's)
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = n_kv_heads;
  c.d_ff = 48;
  c.batch = 2;
  return c;
}

TEST(LongWindow, PrefillAndSessionsInTilesEqualTheReference) {
  for (const auto& [d_model, kv_heads] : {std::pair{64, 1}, std::pair{128, 2}}) {
    const ModelConfig c = long_config(d_model, kv_heads);
    const auto params = init_parameters(c, 31);
    const auto reference = Model::from_parameters(c, params, {});
    const int64_t T = c.length, V = c.vocab_size;
    const auto ids = test::random_ids(2 * T, c.vocab_size, 77);
    const std::vector<int32_t> lengths = {c.length, 131};
    const auto want = reference->logits({ids.data(), 2, T}, lengths, {Device::reference, std::nullopt});
    const int chunks[] = {100, 57, 1, 97, 45};  // appends ending at 100, 157, 158, 255, 300
    for (const std::string& target : test::targets_under_test()) {
      ModelOptions options;
      options.simd_target = target;
      const auto fast = Model::from_parameters(c, params, options);
      for (int threads : {1, 2, 3, 7}) {
        const std::string what = "d_model " + std::to_string(d_model) + " " + target + " threads " + std::to_string(threads);
        ASSERT_TRUE(test::same_bits(fast->logits({ids.data(), 2, T}, lengths, {Device::cpu, threads}), want)) << what;
        Session session(fast, {Device::cpu, threads});
        int64_t at = 0;
        for (int n : chunks) {
          const auto got = session.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(at), static_cast<size_t>(n)));
          at += n;
          const std::vector<float> last(want.begin() + (at - 1) * V, want.begin() + at * V);
          ASSERT_TRUE(test::same_bits(got, last)) << what << " session at " << at;
        }
      }
    }
  }
}

// A long prefill through several layers: rows of 450, 1 and 200 tokens in one call, every
// position's logits, and a session appending 400 tokens after a cached prefix of 50.
TEST(LongWindow, LongPrefillOverSeveralLayersEqualsTheReference) {
  ModelConfig c = long_config(64, 1);
  c.length = 480;
  c.n_layers = 3;
  c.batch = 3;
  const auto params = init_parameters(c, 41);
  const auto reference = Model::from_parameters(c, params, {});
  const int64_t T = c.length, V = c.vocab_size;
  const auto ids = test::random_ids(3 * T, c.vocab_size, 78);
  const std::vector<int32_t> lengths = {450, 1, 200};
  const auto want = reference->logits({ids.data(), 3, T}, lengths, {Device::reference, std::nullopt});
  const auto whole = reference->logits({ids.data(), 1, T}, {}, {Device::reference, std::nullopt});
  for (const std::string& target : test::targets_under_test()) {
    ModelOptions options;
    options.simd_target = target;
    const auto fast = Model::from_parameters(c, params, options);
    for (int threads : {1, 2, 3, 7}) {
      const std::string what = target + " threads " + std::to_string(threads);
      ASSERT_TRUE(test::same_bits(fast->logits({ids.data(), 3, T}, lengths, {Device::cpu, threads}), want)) << what;
      Session session(fast, {Device::cpu, threads});
      int64_t at = 0;
      for (int n : {50, 400}) {
        const auto got = session.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(at), static_cast<size_t>(n)));
        at += n;
        const std::vector<float> last(whole.begin() + (at - 1) * V, whole.begin() + at * V);
        ASSERT_TRUE(test::same_bits(got, last)) << what << " session at " << at;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
