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
#include <span>

#include "lockstep/kv_pool.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

class Session;

struct PrefixCacheOptions {
  size_t max_bytes = size_t{256} << 20;
  int32_t block = 16;
  // Keeps only these bits of each hash: tests set few bits to force collisions.
  uint64_t hash_mask = ~uint64_t{0};
};

struct PrefixCacheStats {
  // Rows the model computed for the calls that used the cache (and the prompt rows sessions
  // started with restore() computed), and rows taken from the cache instead.
  uint64_t rows_computed = 0;
  uint64_t rows_reused = 0;
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

  // Sessions through the cache (the HTTP API's generations; a session is outside the LRU while
  // it runs, so sessions never evict each other).
  //
  // restore: an empty `session` on this cache's model takes a copy of the longest cached prefix
  // of `tokens` of at most `limit` positions (the entry stays, for others) and holds those
  // positions; it returns their count (0: none cached, the session stays empty). The caller
  // appends the rest of `tokens` and gets the bits a computation from position 0 gives; the
  // stats count the prefix as reused and the rest as computed. The session takes its keys and
  // values from this cache's pool from then on, so keep() files them without a copy. (A
  // session appended on the reference device recomputes from position 0 whatever it holds:
  // use this on cpu.)
  int32_t restore(Session& session, std::span<const int32_t> tokens, int32_t limit);
  // keep: files the positions `session` computed as an entry (its keys and values move in when
  // they are a slab of this cache's pool, else are copied into one) and leaves it empty.
  void keep(Session& session);

  PrefixCacheStats stats() const;
  const Model& model() const;
  const std::shared_ptr<KvPool>& pool() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
