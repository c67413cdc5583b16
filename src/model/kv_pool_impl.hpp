// The key/value slab pool's insides (include/lockstep/kv_pool.hpp), for KvCache, the prefix
// cache and sessions.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "kernels/simd/kernels.hpp"
#include "lockstep/kv_pool.hpp"

namespace lockstep {

// A window's keys for every layer in the blocked layout (kernels.hpp: [n_layers][capacity / 16]
// [kv_dim][16], capacity rounded up to whole blocks of simd::kKeysPerBlock positions): a multiple
// of 16 floats, so that the values after them start 64-byte aligned, as a separate block would.
inline size_t kv_key_floats(int32_t n_layers, int32_t kv_dim, int32_t capacity) {
  return static_cast<size_t>(n_layers) * static_cast<size_t>(simd::key_blocks(capacity)) *
         static_cast<size_t>(simd::key_block_stride(kv_dim));
}
// The values for every layer, in blocks too ([n_layers][capacity / 16][kv_heads][16][head_dim]):
// as many floats as the keys.
inline size_t kv_value_floats(int32_t n_layers, int32_t kv_dim, int32_t capacity) {
  return kv_key_floats(n_layers, kv_dim, capacity);
}

struct KvPool::Impl {
  int32_t n_layers = 0, kv_dim = 0, capacity = 0;
  size_t key_floats = 0;   // kv_key_floats(n_layers, kv_dim, capacity)
  size_t slab_floats = 0;  // the keys, then the values
  size_t budget = 0;       // slabs allocated freely

  mutable std::mutex mutex;
  std::vector<simd::AlignedFloats> slabs;  // every slab allocated, in order
  std::vector<float*> free;                // those nobody holds
  KvPoolStats stats;

  // Whoever can give slabs back on request: a prefix cache (evicting its LRU entry). Each call
  // returns whether it gave one back. Called by take() with only reclaim_mutex held, so a
  // reclaimer may lock its own mutex and then give() to the pool.
  std::mutex reclaim_mutex;
  std::vector<std::pair<const void*, std::function<bool()>>> reclaimers;

  Impl(int32_t n_layers, int32_t kv_dim, int32_t capacity, size_t max_bytes);

  // A free slab, or a new one while under the budget; null when every budgeted slab is held.
  float* try_take();
  // A free slab, or a new one even past the budget (counted in stats.over_budget).
  float* take_over_budget();
  // try_take, else asks the reclaimers for slabs, else take_over_budget. Must not be called
  // with a reclaimer's lock held (a prefix cache calls try_take and evicts by itself instead).
  float* take();
  void give(float* slab) noexcept;
  // A new slab (mutex held).
  float* allocate();

  void add_reclaimer(const void* owner, std::function<bool()> reclaim);
  void remove_reclaimer(const void* owner);
  bool fits(int32_t layers, int32_t dim, int32_t cap) const {
    return layers == n_layers && dim == kv_dim && cap == capacity;
  }
};

}  // namespace lockstep
