// The KV cache's keys in blocks of 16 positions (kernels/simd/kernels.hpp, simd::kKeysPerBlock)
// at a window that is not a multiple of 16: sessions whose lengths cross block edges (1, 15, 16,
// 17, 31, 33, the primes 37 and 41 = the whole window) get the reference's logits, memcmp, on
// every SIMD target; KvCache::copy_from copies prefixes ending anywhere in a block; and a session
// restored from the prefix cache with a prefix ending mid-block continues with the bits of a
// fresh one.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/simd/kernels.hpp"
#include "lockstep/model.hpp"
#include "lockstep/prefix_cache.hpp"
#include "lockstep/session.hpp"
#include "model/model_impl.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

constexpr int32_t kWindow = 41;  // a prime: three blocks, the last one partial

std::vector<float> reference_logits_at(const Model& model, std::span<const int32_t> ids, int64_t pos) {
  const auto all = model.logits({ids.data(), 1, pos + 1}, {}, {Device::reference, std::nullopt});
  const int64_t V = model.config().vocab_size;
  return std::vector<float>(all.end() - V, all.end());
}

TEST(KeyBlocks, SessionsAcrossBlockEdgesEqualTheReference) {
  for (const ModelConfig& c : {test::tiny_config(kWindow), test::tiny_gqa_config(kWindow)}) {
    const auto params = init_parameters(c, 31);
    const auto ids = test::random_ids(c.length, c.vocab_size, 32);
    for (const std::string& target : test::targets_under_test()) {
      ModelOptions o;
      o.simd_target = target;
      const auto model = Model::from_parameters(c, params, o);
      for (const CallOptions call : {CallOptions{Device::cpu, 1}, CallOptions{Device::cpu, 3}}) {
        // Lengths after each append: 1, 15, 16, 17, 31, 33, 37, 41 (chunks cross block edges;
        // single tokens land on a block's last and first positions).
        Session s(model, call);
        int32_t pos = 0;
        for (const int32_t end : {1, 15, 16, 17, 31, 33, 37, 41}) {
          const auto logits = s.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(pos),
                                                                            static_cast<size_t>(end - pos)));
          pos = end;
          ASSERT_TRUE(test::same_bits(logits, reference_logits_at(*model, ids, pos - 1)))
              << target << " threads " << *call.threads << " at length " << pos << " d " << c.d_model;
        }
      }
    }
  }
}

TEST(KeyBlocks, CopyFromCopiesPrefixesEndingAnywhereInABlock) {
  const int32_t layers = 2, dim = 12;
  KvCache source(layers, dim, kWindow);
  // Key j's e-th value of layer l is 1000 l + 100 e + j (exact in f32), at its blocked address;
  // value j's e-th its negative, at its own (one head of `dim`: rows dim apart within a block).
  for (int32_t l = 0; l < layers; ++l)
    for (int32_t e = 0; e < dim; ++e)
      for (int32_t j = 0; j < kWindow; ++j) {
        const float v = static_cast<float>(1000 * l + 100 * e + j);
        source.layer_keys(l)[j / simd::kKeysPerBlock * simd::key_block_stride(dim) + e * simd::kKeysPerBlock +
                             j % simd::kKeysPerBlock] = v;
        source.layer_values(l)[simd::value_row(j, dim, simd::key_block_stride(dim)) + e] = -v;
      }
  EXPECT_EQ(source.bytes(), static_cast<size_t>(layers) * 2 * 3 * 16 * dim * sizeof(float));
  for (const int32_t n : {1, 15, 16, 17, 20, 31, 33, 37, 41}) {
    KvCache copy(layers, dim, kWindow);
    for (int32_t l = 0; l < layers; ++l) {
      std::fill_n(copy.layer_keys(l), simd::key_blocks(kWindow) * simd::key_block_stride(dim), -1.0f);
      std::fill_n(copy.layer_values(l), simd::key_blocks(kWindow) * simd::key_block_stride(dim), 1.0f);
    }
    copy.copy_from(source, n);
    for (int32_t l = 0; l < layers; ++l)
      for (int32_t e = 0; e < dim; ++e)
        for (int32_t j = 0; j < kWindow; ++j) {
          const float key = copy.layer_keys(l)[j / simd::kKeysPerBlock * simd::key_block_stride(dim) +
                                               e * simd::kKeysPerBlock + j % simd::kKeysPerBlock];
          const float value = copy.layer_values(l)[simd::value_row(j, dim, simd::key_block_stride(dim)) + e];
          const float want = static_cast<float>(1000 * l + 100 * e + j);
          // Positions below n are copied, the last block whole for both.
          const bool copied = j < simd::key_blocks(n) * simd::kKeysPerBlock;
          ASSERT_EQ(key, copied ? want : -1.0f) << "n " << n << " layer " << l << " e " << e << " j " << j;
          ASSERT_EQ(value, copied ? -want : 1.0f) << "n " << n << " layer " << l << " e " << e << " j " << j;
        }
  }
}

TEST(KeyBlocks, SessionsRestoredMidBlockFromThePrefixCacheKeepTheBits) {
  const ModelConfig c = test::tiny_gqa_config(kWindow);
  const auto model = Model::from_parameters(c, init_parameters(c, 33));
  const auto text = test::random_ids(c.length, c.vocab_size, 34);
  const std::span<const int32_t> all(text);
  // Entries found at multiples of 4 positions: 20 and 36 end mid-block, 32 on an edge.
  PrefixCache cache(model, PrefixCacheOptions{size_t{64} << 20, 4, ~uint64_t{0}});
  Session kept(model, {Device::cpu, 2});
  kept.append(all.subspan(0, 37));
  cache.keep(kept);
  for (const int32_t limit : {23, 33, 36, 40}) {
    Session s(model, {Device::cpu, 2});
    const int32_t got = cache.restore(s, all.subspan(0, static_cast<size_t>(limit) + 1), limit);
    EXPECT_EQ(got, std::min(limit / 4 * 4, 37)) << limit;
    const auto logits = s.append(all.subspan(static_cast<size_t>(got), static_cast<size_t>(limit + 1 - got)));
    ASSERT_TRUE(test::same_bits(logits, reference_logits_at(*model, text, limit))) << "restored " << got;
    // One more token, decoding past the copied prefix's partial block.
    if (limit + 2 <= c.length) {
      ASSERT_TRUE(test::same_bits(s.append(all.subspan(static_cast<size_t>(limit) + 1, 1)),
                                  reference_logits_at(*model, text, limit + 1)))
          << "restored " << got;
    }
  }
}

}  // namespace
}  // namespace lockstep
