// A pool of key/value slabs: the memory that holds the keys and values of sequences (a prefix
// cache's entries, sessions, a call's rows in flight), allocated once and reused, never given
// back to the allocator and taken again per call (issue 16: a process that freed and reallocated
// them per call kept several times --cache-mb resident in malloc's arenas).
//
// Every slab holds one sequence's keys and values for the model's whole window:
// 2 * n_layers * kv_dim * (length rounded up to a multiple of 16: both go in whole blocks of 16
// positions) floats (slab_bytes(); 2 * n_layers * length * kv_dim when length is a multiple of
// 16). The pool allocates new slabs while it
// holds fewer than max_bytes / slab_bytes() of them (its budget); past that, a taker first has
// other holders give slabs back (a prefix cache sharing the pool evicts its least recently used
// entries), and only when every slab is held does the pool allocate past the budget. Slabs
// given back stay in the pool for the next taker. So the pool holds at most
// max(budget, the most slabs held at once) slabs: a prefix cache's entries are within the
// budget and evicted for new work; what is held beyond it is what sessions and calls in flight
// hold at that moment.
//
// One pool serves one model shape (n_layers, kv_dim, length); it is shared by handing the same
// std::shared_ptr to a PrefixCache and to Sessions. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "lockstep/config.hpp"

namespace lockstep {

struct KvPoolStats {
  uint64_t slab_bytes = 0;     // one slab: a window of keys and values for every layer
  uint64_t budget_slabs = 0;   // max_bytes / slab_bytes
  uint64_t slabs = 0;          // allocated so far (freed only with the pool)
  uint64_t in_use = 0;         // held now (cache entries, sessions, calls in flight)
  uint64_t peak_in_use = 0;
  uint64_t over_budget = 0;    // slabs allocated past the budget because every slab was held
};

class KvPool {
 public:
  // Slabs shaped for `config`'s window; a budget of max_bytes (0: none within budget, every
  // slab is allocated when first needed and kept).
  KvPool(const ModelConfig& config, size_t max_bytes);
  ~KvPool();
  KvPool(const KvPool&) = delete;
  KvPool& operator=(const KvPool&) = delete;

  size_t slab_bytes() const;
  KvPoolStats stats() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep
