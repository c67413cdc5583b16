#include "model/kv_pool_impl.hpp"

#include <algorithm>

#include "lockstep/error.hpp"

namespace lockstep {

KvPool::Impl::Impl(int32_t layers, int32_t dim, int32_t cap, size_t max_bytes)
    : n_layers(layers), kv_dim(dim), capacity(cap) {
  key_floats = kv_key_floats(layers, dim, cap);
  slab_floats = key_floats + kv_value_floats(layers, dim, cap);
  stats.slab_bytes = slab_floats * sizeof(float);
  budget = stats.slab_bytes == 0 ? 0 : max_bytes / stats.slab_bytes;
  stats.budget_slabs = budget;
}

float* KvPool::Impl::allocate() {
  // Room first, so that nothing can throw once the slab exists, and give() never allocates.
  slabs.reserve(slabs.size() + 1);
  free.reserve(slabs.size() + 1);
  slabs.push_back(simd::aligned_floats(slab_floats));
  ++stats.slabs;
  return slabs.back().get();
}

float* KvPool::Impl::try_take() {
  std::lock_guard lock(mutex);
  float* slab = nullptr;
  if (!free.empty()) {
    slab = free.back();
    free.pop_back();
  } else if (slabs.size() < budget) {
    slab = allocate();
  } else {
    return nullptr;
  }
  ++stats.in_use;
  stats.peak_in_use = std::max(stats.peak_in_use, stats.in_use);
  return slab;
}

float* KvPool::Impl::take_over_budget() {
  if (float* slab = try_take()) return slab;
  std::lock_guard lock(mutex);
  if (!free.empty()) {  // given back since try_take looked
    float* slab = free.back();
    free.pop_back();
    ++stats.in_use;
    stats.peak_in_use = std::max(stats.peak_in_use, stats.in_use);
    return slab;
  }
  float* slab = allocate();
  ++stats.over_budget;
  ++stats.in_use;
  stats.peak_in_use = std::max(stats.peak_in_use, stats.in_use);
  return slab;
}

float* KvPool::Impl::take() {
  if (float* slab = try_take()) return slab;
  {
    std::lock_guard lock(reclaim_mutex);
    for (auto& [owner, reclaim] : reclaimers) {
      while (reclaim()) {
        if (float* slab = try_take()) return slab;
      }
    }
  }
  return take_over_budget();
}

void KvPool::Impl::give(float* slab) noexcept {
  if (!slab) return;
  std::lock_guard lock(mutex);
  free.push_back(slab);  // never past its capacity: reserved for every slab in allocate()
  --stats.in_use;
}

void KvPool::Impl::add_reclaimer(const void* owner, std::function<bool()> reclaim) {
  std::lock_guard lock(reclaim_mutex);
  reclaimers.emplace_back(owner, std::move(reclaim));
}

void KvPool::Impl::remove_reclaimer(const void* owner) {
  std::lock_guard lock(reclaim_mutex);
  std::erase_if(reclaimers, [owner](const auto& r) { return r.first == owner; });
}

KvPool::KvPool(const ModelConfig& config, size_t max_bytes)
    : impl_(std::make_unique<Impl>(config.n_layers, config.kv_dim(), config.length, max_bytes)) {}

KvPool::~KvPool() = default;

size_t KvPool::slab_bytes() const { return static_cast<size_t>(impl_->stats.slab_bytes); }

KvPoolStats KvPool::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace lockstep
