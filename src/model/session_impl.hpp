// A session's insides (include/lockstep/session.hpp), for session.cpp and the prefix cache,
// which starts sessions from its entries and files what they computed.
#pragma once

#include <memory>
#include <vector>

#include "lockstep/session.hpp"
#include "model/kv_pool_impl.hpp"
#include "model/model_impl.hpp"

namespace lockstep {

struct Session::Impl {
  std::shared_ptr<const Model> model;
  CallOptions call;
  std::vector<int32_t> tokens;
  std::shared_ptr<KvPool> pool;  // where `cache` comes from; null: its own allocation
  // The fast path's keys and values for positions [0, cached); made on the first cpu append.
  std::unique_ptr<KvCache> cache;
  int32_t cached = 0;
};

}  // namespace lockstep
