#include <algorithm>
#include <cstring>
#include <string>

#include "model/prefix_cache_impl.hpp"
#include "model/session_impl.hpp"

namespace lockstep {

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, const PrefixCacheOptions& options)
    : PrefixCache(std::move(model), options, nullptr) {}

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, const PrefixCacheOptions& options,
                         std::shared_ptr<KvPool> pool)
    : impl_(std::make_unique<Impl>()) {
  if (!model) throw Error(ErrorKind::invalid_argument, "a prefix cache needs a model");
  if (options.block < 1) throw Error(ErrorKind::invalid_argument, "the prefix cache's block must be at least 1");
  const ModelConfig& c = model->config();
  if (!pool) pool = std::make_shared<KvPool>(c, options.max_bytes);
  if (!pool->impl().fits(c.n_layers, c.kv_dim(), c.length))
    throw Error(ErrorKind::invalid_argument, "the key/value pool was made for another model's shape");
  impl_->model = std::move(model);
  impl_->options = options;
  impl_->pool = std::move(pool);
  // Sessions (or anyone) taking from a shared pool past its budget have this cache evict first.
  Impl* impl = impl_.get();
  impl_->pool->impl().add_reclaimer(impl, [impl] {
    std::lock_guard lock(impl->mutex);
    if (impl->lru.empty()) return false;
    impl->remove(impl->lru.back());
    ++impl->stats.evictions;
    return true;
  });
}

PrefixCache::~PrefixCache() { impl_->pool->impl().remove_reclaimer(impl_.get()); }

const std::shared_ptr<KvPool>& PrefixCache::pool() const { return impl_->pool; }

const Model& PrefixCache::model() const { return *impl_->model; }

PrefixCacheStats PrefixCache::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

int32_t PrefixCache::restore(Session& session, std::span<const int32_t> tokens, int32_t limit) {
  Session::Impl& s = session.impl();
  if (s.model.get() != impl_->model.get())
    throw Error(ErrorKind::invalid_argument, "the session belongs to another model than the prefix cache");
  if (!s.tokens.empty())
    throw Error(ErrorKind::state, "a session restored from the prefix cache must be empty; it holds " +
                                      std::to_string(s.tokens.size()) + " positions");
  limit = std::min(limit, static_cast<int32_t>(tokens.size()));
  Impl& c = *impl_;
  std::unique_ptr<KvCache> kv;
  std::lock_guard lock(c.mutex);
  if (!s.cache) s.pool = c.pool;  // its slab (taken at its first append) can later move in whole
  const auto [entry, length] = c.find(tokens, limit);
  if (entry) {
    s.pool = c.pool;
    // A copy: the entry stays for the other sessions and calls sharing the prefix. The slab comes
    // from the cache's pool without asking it to evict under its own lock (acquire).
    kv = c.acquire(entry);
    kv->copy_from(*entry->kv, length);
    s.tokens.assign(tokens.begin(), tokens.begin() + length);
    s.cache = std::move(kv);
    s.cached = length;
  }
  c.stats.rows_reused += static_cast<uint64_t>(length);
  c.stats.rows_computed += tokens.size() - static_cast<size_t>(length);
  return length;
}

void PrefixCache::keep(Session& session) {
  Session::Impl& s = session.impl();
  if (s.model.get() != impl_->model.get())
    throw Error(ErrorKind::invalid_argument, "the session belongs to another model than the prefix cache");
  const int32_t n = std::min(s.cached, static_cast<int32_t>(s.tokens.size()));
  std::unique_ptr<KvCache> kv = std::move(s.cache);
  const std::vector<int32_t> tokens(s.tokens.begin(), s.tokens.begin() + std::max(n, 0));
  s.tokens.clear();
  s.cached = 0;
  if (!kv || n <= 0) return;  // nothing computed (or the reference device, which keeps no keys)
  Impl& c = *impl_;
  std::lock_guard lock(c.mutex);
  if (kv->pool() != c.pool.get()) {
    std::unique_ptr<KvCache> slab = c.acquire(nullptr);
    slab->copy_from(*kv, n);
    kv = std::move(slab);
  }
  c.insert(tokens, std::move(kv));
}

std::vector<uint64_t> PrefixCache::Impl::prefix_hashes(std::span<const int32_t> tokens) const {
  // FNV-1a over each token's four bytes, chained: h_L extends h_{L-1}.
  std::vector<uint64_t> out(tokens.size());
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (t >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
    out[i] = h & options.hash_mask;
  }
  return out;
}

std::pair<PrefixCache::Impl::Entry*, int32_t> PrefixCache::Impl::find(std::span<const int32_t> tokens, int32_t limit) {
  if (limit <= 0 || index.empty()) return {nullptr, 0};
  const std::vector<uint64_t> hashes = prefix_hashes(tokens.subspan(0, static_cast<size_t>(limit)));
  for (int32_t L = limit; L >= 1; --L) {
    const auto it = index.find(hashes[static_cast<size_t>(L - 1)]);
    if (it == index.end()) continue;
    for (Entry* e : it->second) {
      if (static_cast<int32_t>(e->tokens.size()) < L) continue;
      // The hash only finds candidates; the tokens decide.
      if (std::memcmp(e->tokens.data(), tokens.data(), static_cast<size_t>(L) * sizeof(int32_t)) != 0) {
        ++stats.collisions;
        continue;
      }
      lru.splice(lru.begin(), lru, e->lru);
      return {e, L};
    }
  }
  return {nullptr, 0};
}

void PrefixCache::Impl::remove(Entry* e) {
  for (uint64_t key : e->keys) {
    auto it = index.find(key);
    if (it == index.end()) continue;
    auto& list = it->second;
    list.erase(std::remove(list.begin(), list.end(), e), list.end());
    if (list.empty()) index.erase(it);
  }
  lru.erase(e->lru);
  if (e->kv) stats.bytes -= e->kv->bytes();
  --stats.entries;
  storage.erase(std::find_if(storage.begin(), storage.end(), [e](const auto& p) { return p.get() == e; }));
}

std::unique_ptr<KvCache> PrefixCache::Impl::take(Entry* e) {
  std::unique_ptr<KvCache> kv = std::move(e->kv);  // e->kv is null now: remove counts no bytes
  stats.bytes -= kv->bytes();
  remove(e);
  return kv;
}

std::unique_ptr<KvCache> PrefixCache::Impl::acquire(const Entry* keep) {
  KvPool::Impl& p = pool->impl();
  float* slab = nullptr;
  for (;;) {
    slab = p.try_take();
    if (slab) break;
    Entry* victim = nullptr;
    for (auto it = lru.rbegin(); it != lru.rend(); ++it) {
      if (*it != keep) {
        victim = *it;
        break;
      }
    }
    if (!victim) break;
    remove(victim);  // its slab goes back to the pool
    ++stats.evictions;
  }
  if (!slab) slab = p.take_over_budget();  // every slab is held (by calls in flight, sessions)
  try {
    return std::make_unique<KvCache>(pool, slab);
  } catch (...) {
    p.give(slab);
    throw;
  }
}

void PrefixCache::Impl::insert(std::span<const int32_t> tokens, std::unique_ptr<KvCache> kv) {
  if (kv->bytes() > options.max_bytes) return;  // it could never stay: not filed at all
  // Entries that are prefixes of this one are redundant now.
  // Collected first and removed once each: with colliding hashes one entry can sit in several of
  // the lists looked at (or, before keys were deduplicated, twice in one), and removing it while
  // a list still names it would read freed memory.
  const std::vector<uint64_t> hashes = prefix_hashes(tokens);
  std::vector<Entry*> redundant;
  for (size_t L = 1; L <= tokens.size(); ++L) {
    const auto it = index.find(hashes[L - 1]);
    if (it == index.end()) continue;
    for (Entry* e : it->second)
      if (e->tokens.size() == L && std::equal(e->tokens.begin(), e->tokens.end(), tokens.begin())) redundant.push_back(e);
  }
  std::sort(redundant.begin(), redundant.end());
  redundant.erase(std::unique(redundant.begin(), redundant.end()), redundant.end());
  for (Entry* e : redundant) remove(e);
  auto entry = std::make_unique<Entry>();
  Entry* e = entry.get();
  e->tokens.assign(tokens.begin(), tokens.end());
  e->kv = std::move(kv);
  const size_t n = tokens.size();
  const size_t block = static_cast<size_t>(options.block);
  for (size_t L = block; L <= n; L += block) e->keys.push_back(hashes[L - 1]);
  if (n % block != 0) e->keys.push_back(hashes[n - 1]);
  // Masked hashes of different lengths can be equal: an entry is filed at most once per key.
  std::sort(e->keys.begin(), e->keys.end());
  e->keys.erase(std::unique(e->keys.begin(), e->keys.end()), e->keys.end());
  for (uint64_t key : e->keys) index[key].push_back(e);
  lru.push_front(e);
  e->lru = lru.begin();
  stats.bytes += e->kv->bytes();
  ++stats.entries;
  storage.push_back(std::move(entry));
  while (stats.bytes > options.max_bytes && !lru.empty()) {
    remove(lru.back());
    ++stats.evictions;
  }
}

std::string PrefixCache::Impl::check() const {
  uint64_t bytes = 0;
  size_t filed = 0;
  for (const auto& owned : storage) {
    const Entry* e = owned.get();
    bytes += e->kv ? e->kv->bytes() : 0;
    for (size_t i = 0; i < e->keys.size(); ++i) {
      for (size_t j = 0; j < i; ++j)
        if (e->keys[j] == e->keys[i]) return "an entry lists key " + std::to_string(e->keys[i]) + " twice";
      const auto it = index.find(e->keys[i]);
      if (it == index.end()) return "an entry's key " + std::to_string(e->keys[i]) + " is not in the index";
      const auto times = std::count(it->second.begin(), it->second.end(), e);
      if (times != 1)
        return "an entry is filed " + std::to_string(times) + " times under key " + std::to_string(e->keys[i]);
      ++filed;
    }
  }
  size_t listed = 0;
  for (const auto& [key, list] : index) {
    if (list.empty()) return "key " + std::to_string(key) + " has an empty list";
    listed += list.size();
  }
  if (listed != filed) return "the index holds " + std::to_string(listed) + " filings, the entries " + std::to_string(filed);
  if (lru.size() != storage.size() || stats.entries != storage.size())
    return "entries: " + std::to_string(storage.size()) + " stored, " + std::to_string(lru.size()) + " in the LRU list, " +
           std::to_string(stats.entries) + " counted";
  if (stats.bytes != bytes) return "bytes: " + std::to_string(bytes) + " held, " + std::to_string(stats.bytes) + " counted";
  if (stats.bytes > options.max_bytes) return "bytes over max_bytes";
  return {};
}

}  // namespace lockstep
