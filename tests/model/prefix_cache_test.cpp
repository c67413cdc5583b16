// The prefix cache: calls through it get the bits of the same calls without it, whatever the
// cache holds: shared and unshared prefixes, batches, evictions, a cache too small for one window,
// and forced hash collisions. And it does reuse rows.
#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"
#include "lockstep/prefix_cache.hpp"
#include "lockstep/session.hpp"
#include "model/prefix_cache_impl.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

// One call's input bytes: ids [1, T] then `at` (when the layout has it).
std::vector<uint8_t> input_of(const std::vector<int32_t>& ids, int32_t at, bool with_at) {
  std::vector<uint8_t> bytes(ids.size() * 4 + (with_at ? 4 : 0));
  std::memcpy(bytes.data(), ids.data(), ids.size() * 4);
  if (with_at) std::memcpy(bytes.data() + ids.size() * 4, &at, 4);
  return bytes;
}

// Runs the calls in batches of `batch` with and without the cache and compares every answer.
void expect_same_answers(const std::shared_ptr<const Model>& model, const CallLayout& layout,
                         const std::vector<std::vector<uint8_t>>& calls, size_t batch, PrefixCache& cache,
                         const std::string& what) {
  for (size_t begin = 0; begin < calls.size(); begin += batch) {
    const size_t n = std::min(batch, calls.size() - begin);
    std::vector<std::vector<uint8_t>> with(n, std::vector<uint8_t>(layout.output_bytes()));
    std::vector<std::vector<uint8_t>> without(n, std::vector<uint8_t>(layout.output_bytes()));
    std::vector<std::span<const uint8_t>> in;
    std::vector<std::span<uint8_t>> out_with, out_without;
    for (size_t i = 0; i < n; ++i) {
      in.emplace_back(calls[begin + i]);
      out_with.emplace_back(with[i]);
      out_without.emplace_back(without[i]);
    }
    const auto a = run_calls(*model, layout, in, out_with, {Device::cpu, 2}, &cache);
    const auto b = run_calls(*model, layout, in, out_without, {Device::cpu, 1});
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i].ok, b[i].ok) << what;
      ASSERT_EQ(with[i], without[i]) << what << ": call " << begin + i;
    }
  }
}

// Sampling-loop calls: several prompts (some sharing a prefix), each growing one token per call,
// interleaved; plus calls that jump back to shorter prefixes.
std::vector<std::vector<uint8_t>> sampling_calls(const ModelConfig& c, bool with_at, uint64_t seed) {
  std::vector<std::vector<int32_t>> texts;
  const auto shared = test::random_ids(c.length, c.vocab_size, seed);
  for (int p = 0; p < 4; ++p) {
    auto t = test::random_ids(c.length, c.vocab_size, seed + 1 + static_cast<uint64_t>(p));
    if (p < 2) std::copy(shared.begin(), shared.begin() + c.length / 2, t.begin());  // a shared prefix
    texts.push_back(t);
  }
  std::vector<std::vector<uint8_t>> calls;
  for (int32_t at = 0; at < c.length; ++at)
    for (const auto& t : texts) {
      std::vector<int32_t> window(t.begin(), t.begin() + at + 1);
      window.resize(static_cast<size_t>(c.length), 0);  // padding after `at` is never read
      calls.push_back(input_of(window, at, with_at));
      if (at % 7 == 3) calls.push_back(input_of(window, at / 2, with_at));  // back to a shorter prefix
    }
  return calls;
}

// An imported architecture's parts: biases on q, k, v and o (non-zero) and Llama 3 RoPE scaling.
ModelConfig with_imported_parts(ModelConfig c) {
  c.qkv_bias = c.o_bias = true;
  c.rope_scaling = RopeScaling{.factor = 8.0f, .low_freq_factor = 1.0f, .high_freq_factor = 4.0f,
                               .original_max_position = 32};
  return c;
}

std::vector<float> parameters_with_biases(const ModelConfig& c, uint64_t seed) {
  std::vector<float> params = init_parameters(c, seed);
  const ParameterRegistry registry(c);
  for (const ParameterInfo& e : registry.entries())
    if (e.name.ends_with(".bq") || e.name.ends_with(".bk") || e.name.ends_with(".bv") || e.name.ends_with(".bo"))
      for (int64_t i = 0; i < e.count; ++i) params[static_cast<size_t>(e.offset + i)] = 0.05f * static_cast<float>(i % 7 - 3);
  return params;
}

TEST(PrefixCache, AnswersEqualTheUncachedOnesAndRowsAreReused) {
  for (const ModelConfig& c : {test::tiny_config(24), test::tiny_gqa_config(20), with_imported_parts(test::tiny_gqa_config(20))}) {
    const auto model = Model::from_parameters(c, parameters_with_biases(c, 21));
    for (const bool with_at : {true, false}) {
      const CallLayout layout(c, {}, with_at);
      PrefixCache cache(model);
      const auto calls = sampling_calls(c, with_at, 30);
      for (size_t batch : {size_t{1}, size_t{3}, size_t{8}})
        expect_same_answers(model, layout, calls, batch, cache, std::string("at ") + (with_at ? "yes" : "no") +
                                                                    " batch " + std::to_string(batch));
      const PrefixCacheStats s = cache.stats();
      if (with_at) {
        // Each loop step reuses its whole prefix; the jumps back to a shorter prefix reuse only
        // whole blocks of 16 (the entries ending there were replaced by longer ones).
        EXPECT_GT(s.rows_reused, 2 * s.rows_computed) << "a sampling loop should mostly reuse";
      } else {
        EXPECT_EQ(s.rows_reused, 0u) << "calls wanting every position's outputs compute every row";
      }
    }
  }
}

TEST(PrefixCache, EvictionsATinyCacheAndForcedCollisionsNeverChangeABit) {
  const ModelConfig c = test::tiny_gqa_config(20);
  const auto model = Model::from_parameters(c, init_parameters(c, 22));
  const CallLayout layout(c, {"logits"}, true);
  const auto calls = sampling_calls(c, true, 40);
  const size_t one_window = 2 * static_cast<size_t>(c.n_layers) * c.length * c.kv_dim() * sizeof(float);
  struct Case {
    const char* name;
    PrefixCacheOptions options;
  };
  for (const Case& k : {Case{"two windows", {2 * one_window, 16, ~uint64_t{0}}},
                        Case{"smaller than one window", {one_window / 2, 16, ~uint64_t{0}}},
                        Case{"colliding hashes", {size_t{64} << 20, 4, 0x3}}}) {
    PrefixCache cache(model, k.options);
    expect_same_answers(model, layout, calls, 5, cache, k.name);
    const PrefixCacheStats s = cache.stats();
    if (std::string(k.name) == "two windows") {
      EXPECT_GT(s.evictions, 0u);
    }
    if (std::string(k.name) == "smaller than one window") {
      EXPECT_EQ(s.entries, 0u);
      EXPECT_EQ(s.rows_reused, 0u);
    }
    if (std::string(k.name) == "colliding hashes") {
      EXPECT_GT(s.collisions, 0u);
      EXPECT_GT(s.rows_reused, 0u);
    }
    EXPECT_LE(s.bytes, k.options.max_bytes);
  }
}

// Masked hashes make an entry's keys equal to each other (mask 0: every key is 0) and to other
// entries' keys. Each entry must still be filed once per distinct key, and replacing or evicting
// one must leave the index, the LRU list and the counts consistent (issue 16: an entry filed
// twice under one key was freed twice). Checked after every batch, not only at the end.
TEST(PrefixCache, CollidingKeysFileAnEntryOncePerKeyAndKeepTheIndexConsistent) {
  const ModelConfig c = test::tiny_gqa_config(20);
  const auto model = Model::from_parameters(c, init_parameters(c, 23));
  const CallLayout layout(c, {"logits"}, true);
  const auto calls = sampling_calls(c, true, 50);
  const size_t one_window = 2 * static_cast<size_t>(c.n_layers) * c.length * c.kv_dim() * sizeof(float);
  for (const uint64_t mask : {uint64_t{0}, uint64_t{1}, uint64_t{3}}) {
    for (const int32_t block : {1, 4}) {
      for (const size_t windows : {size_t{3}, size_t{64}}) {
        const std::string what = "mask " + std::to_string(mask) + " block " + std::to_string(block) + " windows " +
                                 std::to_string(windows);
        PrefixCache cache(model, {windows * one_window, block, mask});
        for (size_t begin = 0; begin < calls.size(); begin += 4) {
          std::vector<std::span<const uint8_t>> in;
          std::vector<std::vector<uint8_t>> outs;
          for (size_t i = begin; i < std::min(calls.size(), begin + 4); ++i) {
            in.emplace_back(calls[i]);
            outs.emplace_back(layout.output_bytes());
          }
          std::vector<std::span<uint8_t>> out_spans(outs.begin(), outs.end());
          run_calls(*model, layout, in, out_spans, {Device::cpu, 1}, &cache);
          std::string broken;
          {
            std::lock_guard lock(cache.impl().mutex);
            broken = cache.impl().check();
          }
          ASSERT_EQ(broken, "") << what << ", after call " << begin;
        }
        const PrefixCacheStats s = cache.stats();
        EXPECT_GT(s.entries, 0u) << what;
        if (mask == 0) {
          EXPECT_GT(s.collisions, 0u) << what;
        }
      }
    }
  }
}

// Sessions through the cache (PrefixCache::restore and keep): a session started from a cached
// prefix and given the rest gets the logits of a session computed from position 0, bit for bit,
// whether the prefix came from a call's entry or a kept session's, from a shorter or a longer
// entry, through forced collisions; keep files a session's rows whether its keys are a slab of
// the cache's pool or its own; and restore refuses a session that is not empty.
TEST(PrefixCache, SessionsRestoredFromTheCacheGetTheBitsOfAFreshOne) {
  const ModelConfig c = test::tiny_gqa_config(20);
  const auto model = Model::from_parameters(c, init_parameters(c, 24));
  const auto text = test::random_ids(c.length, c.vocab_size, 50);
  // Logits as bytes, so that the comparisons are of bits.
  auto bits = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(float));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  auto fresh_logits = [&](int32_t n) {
    Session s(model, {Device::cpu, 1});
    return bits(s.append(std::span<const int32_t>(text).subspan(0, static_cast<size_t>(n))));
  };
  for (const PrefixCacheOptions& options : {PrefixCacheOptions{size_t{64} << 20, 16, ~uint64_t{0}},
                                            PrefixCacheOptions{size_t{64} << 20, 4, 0x3}}) {
    PrefixCache cache(model, options);
    const std::span<const int32_t> all(text);
    // Cold: nothing restored; the session computes everything and is kept.
    Session a(model, {Device::cpu, 2});
    EXPECT_EQ(cache.restore(a, all.subspan(0, 12), 11), 0);
    EXPECT_EQ(a.length(), 0);
    EXPECT_EQ(bits(a.append(all.subspan(0, 12))), fresh_logits(12));
    cache.keep(a);
    EXPECT_EQ(a.length(), 0);
    EXPECT_EQ(cache.stats().entries, 1u);
    // A longer text: the 12 kept positions come back (the entry's whole length), the rest is new.
    Session b(model, {Device::cpu, 2});
    EXPECT_EQ(cache.restore(b, all.subspan(0, 18), 17), 12);
    EXPECT_EQ(bits(b.append(all.subspan(12, 6))), fresh_logits(18));
    cache.keep(b);  // replaces the 12-position entry, which is its prefix
    EXPECT_EQ(cache.stats().entries, 1u);
    // A shorter text than the entry: a copy of its first positions (found at a block boundary).
    Session d(model, {Device::cpu, 1});
    const int32_t got = cache.restore(d, all.subspan(0, 9), 8);
    EXPECT_EQ(got, options.block == 16 ? 0 : 8);
    EXPECT_EQ(bits(d.append(all.subspan(static_cast<size_t>(got), static_cast<size_t>(9 - got)))), fresh_logits(9));
    // Not empty: refused, nothing changed.
    EXPECT_THROW(cache.restore(d, all.subspan(0, 18), 17), Error);
    EXPECT_EQ(d.length(), 9);
    // A session with its own keys (no pool) is copied into a slab of the cache's pool.
    Session own(model, {Device::cpu, 1});
    own.append(all.subspan(0, c.length));
    cache.keep(own);
    Session e(model, {Device::cpu, 1});
    EXPECT_GE(cache.restore(e, all.subspan(0, c.length), c.length - 1), 16);  // colliding hashes find more
    EXPECT_EQ(bits(e.append(all.subspan(static_cast<size_t>(e.length())))), fresh_logits(c.length));
    EXPECT_EQ(cache.impl().check(), "");
  }
}

}  // namespace
}  // namespace lockstep
