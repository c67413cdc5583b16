// The prefix cache's entries and index (include/lockstep/prefix_cache.hpp), for run_calls.
#pragma once

#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "lockstep/prefix_cache.hpp"
#include "model/kv_pool_impl.hpp"
#include "model/model_impl.hpp"

namespace lockstep {

struct PrefixCache::Impl {
  struct Entry {
    std::vector<int32_t> tokens;   // positions [0, tokens.size()) whose keys and values kv holds
    std::unique_ptr<KvCache> kv;
    std::vector<uint64_t> keys;    // the index keys it is filed under
    std::list<Entry*>::iterator lru;
  };

  std::shared_ptr<const Model> model;
  PrefixCacheOptions options;
  std::shared_ptr<KvPool> pool;  // every entry's keys and values are a slab of it
  mutable std::mutex mutex;
  std::list<Entry*> lru;  // most recently used first
  std::unordered_map<uint64_t, std::vector<Entry*>> index;
  std::vector<std::unique_ptr<Entry>> storage;
  PrefixCacheStats stats;

  // The prefix hashes h_1 .. h_n of tokens (h_L covers tokens [0, L)), masked.
  std::vector<uint64_t> prefix_hashes(std::span<const int32_t> tokens) const;

  // The entry with the longest prefix of `tokens` of at most `limit` positions, and that length;
  // only lengths the index files (block multiples, an entry's full length) are found.
  std::pair<Entry*, int32_t> find(std::span<const int32_t> tokens, int32_t limit);
  // Takes an entry's keys and values out (the entry is removed), or copies its first `positions`.
  std::unique_ptr<KvCache> take(Entry* entry);
  // A slab of the pool for a call's row (mutex held): a free or budgeted one, else the least
  // recently used entries other than `keep` are evicted until one is free, else one past the
  // budget (every slab is held by calls in flight or sessions). Never calls KvPool's take(),
  // which would ask this cache to evict under its own lock.
  std::unique_ptr<KvCache> acquire(const Entry* keep);
  // Files `kv` (holding `tokens`) as the most recent entry, drops entries it makes redundant
  // (its prefixes), then evicts the least recently used until within max_bytes.
  void insert(std::span<const int32_t> tokens, std::unique_ptr<KvCache> kv);
  void remove(Entry* entry);
  // The first broken invariant of the entries, index, LRU list and stats ("" when none): every
  // entry is filed exactly once under each of its (distinct) keys and nowhere else, and the
  // counts match. For tests.
  std::string check() const;
};

}  // namespace lockstep
