// The key/value slab pool: a prefix cache's entries and its calls' rows reuse the slabs its
// budget allows (allocating past it only for what one run holds at once), sessions may share the
// pool and make the cache evict, and none of it changes a bit.
#include <gtest/gtest.h>

#include <cstring>

#include "lockstep/call.hpp"
#include "lockstep/kv_pool.hpp"
#include "lockstep/model.hpp"
#include "lockstep/prefix_cache.hpp"
#include "lockstep/session.hpp"
#include "model/prefix_cache_impl.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

// One window's keys and values, both in whole blocks of 16 positions (the window rounded up:
// kernels/simd/kernels.hpp).
size_t window_bytes(const ModelConfig& c) {
  const size_t positions = (static_cast<size_t>(c.length) + 15) / 16 * 16;
  return static_cast<size_t>(c.n_layers) * 2 * positions * c.kv_dim() * sizeof(float);
}

// `count` calls of distinct random windows (at the last position), run `batch` at a time through
// the cache; every answer compared with the same call without it.
void run_distinct(const std::shared_ptr<const Model>& model, PrefixCache& cache, int count, size_t batch,
                  uint64_t seed) {
  const ModelConfig& c = model->config();
  const CallLayout layout(c, {"logits"}, true);
  for (int begin = 0; begin < count; begin += static_cast<int>(batch)) {
    std::vector<std::vector<uint8_t>> inputs;
    for (size_t i = 0; i < batch; ++i) {
      std::vector<int32_t> ids = test::random_ids(c.length, c.vocab_size, seed + static_cast<uint64_t>(begin) + i);
      const int32_t at = c.length - 1;
      std::vector<uint8_t> bytes(ids.size() * 4 + 4);
      std::memcpy(bytes.data(), ids.data(), ids.size() * 4);
      std::memcpy(bytes.data() + ids.size() * 4, &at, 4);
      inputs.push_back(std::move(bytes));
    }
    std::vector<std::vector<uint8_t>> with(batch, std::vector<uint8_t>(layout.output_bytes()));
    std::vector<std::vector<uint8_t>> without = with;
    std::vector<std::span<const uint8_t>> in(inputs.begin(), inputs.end());
    std::vector<std::span<uint8_t>> out_with(with.begin(), with.end()), out_without(without.begin(), without.end());
    run_calls(*model, layout, in, out_with, {Device::cpu, 2}, &cache);
    run_calls(*model, layout, in, out_without, {Device::cpu, 1});
    for (size_t i = 0; i < batch; ++i) ASSERT_EQ(with[i], without[i]) << "call " << begin + static_cast<int>(i);
  }
}

TEST(KvPool, ACacheReusesItsSlabsAndNeverAllocatesPastItsBudget) {
  const ModelConfig c = test::tiny_gqa_config(20);
  const auto model = Model::from_parameters(c, init_parameters(c, 31));
  PrefixCache cache(model, {5 * window_bytes(c)});
  run_distinct(model, cache, 120, 3, 100);
  const KvPoolStats p = cache.pool()->stats();
  const PrefixCacheStats s = cache.stats();
  EXPECT_EQ(p.slab_bytes, window_bytes(c));
  EXPECT_EQ(p.budget_slabs, 5u);
  EXPECT_EQ(p.slabs, 5u) << "120 calls of distinct windows should cycle through the budget's slabs";
  EXPECT_EQ(p.over_budget, 0u);
  EXPECT_EQ(p.in_use, s.entries) << "between calls only the entries hold slabs";
  EXPECT_GT(s.evictions, 100u);
  std::lock_guard lock(cache.impl().mutex);
  EXPECT_EQ(cache.impl().check(), "");
}

TEST(KvPool, ACacheSmallerThanOneWindowKeepsOnlyWhatOneRunHolds) {
  const ModelConfig c = test::tiny_config(16);
  const auto model = Model::from_parameters(c, init_parameters(c, 32));
  PrefixCache cache(model, {window_bytes(c) / 2});
  run_distinct(model, cache, 40, 4, 200);
  const KvPoolStats p = cache.pool()->stats();
  EXPECT_EQ(p.budget_slabs, 0u);
  EXPECT_EQ(p.slabs, 4u) << "a run of 4 rows holds 4 slabs; later runs reuse them";
  EXPECT_EQ(p.over_budget, 4u);
  EXPECT_EQ(p.in_use, 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(KvPool, SessionsSharingACachesPoolMakeItEvictAndKeepTheirBits) {
  const ModelConfig c = test::tiny_gqa_config(24);
  const auto model = Model::from_parameters(c, init_parameters(c, 33));
  auto pool = std::make_shared<KvPool>(c, 4 * window_bytes(c));
  PrefixCache cache(model, {4 * window_bytes(c)}, pool);
  run_distinct(model, cache, 8, 2, 300);
  ASSERT_EQ(cache.stats().entries, 4u) << "the cache fills the pool's budget";
  {
    std::vector<Session> pooled, alone;
    for (int i = 0; i < 3; ++i) {
      pooled.emplace_back(model, CallOptions{Device::cpu, 1}, pool);
      alone.emplace_back(model, CallOptions{Device::cpu, 1});
    }
    for (int i = 0; i < 3; ++i) {
      const auto prompt = test::random_ids(10, c.vocab_size, 400 + static_cast<uint64_t>(i));
      EXPECT_EQ(pooled[static_cast<size_t>(i)].append(prompt), alone[static_cast<size_t>(i)].append(prompt));
    }
    Session fork = pooled[0].fork(6);
    Session fork_alone = alone[0].fork(6);
    const std::vector<int32_t> more = {1, 2, 3};
    EXPECT_EQ(fork.append(more), fork_alone.append(more));
    const KvPoolStats p = pool->stats();
    EXPECT_EQ(p.slabs, 4u) << "the sessions' slabs came from the cache's evictions";
    EXPECT_EQ(p.in_use, 4u);
    EXPECT_EQ(cache.stats().entries, 0u);
  }
  EXPECT_EQ(pool->stats().in_use, 0u) << "sessions give their slabs back when they go";
  run_distinct(model, cache, 6, 2, 500);
  EXPECT_EQ(pool->stats().slabs, 4u);
}

TEST(KvPool, APoolOfAnotherShapeIsRefused) {
  const ModelConfig c = test::tiny_config(16);
  const ModelConfig other = test::tiny_config(20);
  const auto model = Model::from_parameters(c, init_parameters(c, 34));
  auto pool = std::make_shared<KvPool>(other, 1 << 20);
  EXPECT_THROW(PrefixCache(model, {}, pool), Error);
  EXPECT_THROW(Session(model, {}, pool), Error);
}

}  // namespace
}  // namespace lockstep
