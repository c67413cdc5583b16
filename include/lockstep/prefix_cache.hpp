// A cache of computed prefixes for calls (serve's --cache-mb): the keys and values of the rows a
// call computed, kept so that a later call sharing the prefix computes only the rows after it.
// Position t reads only positions <= t, so a cached prefix gives exactly the bits a recomputation
// would (docs/ARITHMETIC.md).
//
// Entries are found by token content: chained 64-bit hashes of the prefix at every block of
// `block` tokens and at the entry's own length (its partial last block), and every match is
// verified against the tokens themselves, so a hash collision can never give a wrong answer. The
// least recently used entries are evicted to stay within max_bytes.
//
// The keys and values live in slabs of a KvPool (include/lockstep/kv_pool.hpp), one window per
// slab: the cache's own pool with a budget of max_bytes, or one shared with sessions. A call's
// rows take their slabs from the same pool (evicting the least recently used entries when the
// budget is spent), and a row's slab becomes its entry afterwards, so the cache's memory is
// allocated once and reused rather than freed to the allocator and taken again per call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lockstep/kv_pool.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

struct PrefixCacheOptions {
  size_t max_bytes = size_t{256} << 20;
  int32_t block = 16;
  // Keeps only these bits of each hash: tests set few bits to force collisions.
  uint64_t hash_mask = ~uint64_t{0};
};

struct PrefixCacheStats {
  uint64_t rows_computed = 0;  // rows the model computed for the calls that used the cache
  uint64_t rows_reused = 0;    // rows taken from the cache instead
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t evictions = 0;
  uint64_t collisions = 0;  // hash matches whose tokens differed (refused)
};

class PrefixCache {
 public:
  explicit PrefixCache(std::shared_ptr<const Model> model, const PrefixCacheOptions& options = {});
  // With `pool` (made for this model's shape) shared with sessions; null: a pool of its own with
  // a budget of options.max_bytes.
  PrefixCache(std::shared_ptr<const Model> model, const PrefixCacheOptions& options, std::shared_ptr<KvPool> pool);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  PrefixCacheStats stats() const;
  const Model& model() const;
  const std::shared_ptr<KvPool>& pool() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
