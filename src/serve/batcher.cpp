#include "serve/batcher.hpp"

#include <algorithm>
#include <exception>
#include <new>

namespace lockstep::serve {

Batcher::Batcher(const Model& model, const CallLayout& layout, int batch, const CallOptions& options,
                 PrefixCache* cache)
    : model_(model), layout_(layout), batch_(static_cast<size_t>(std::max(batch, 1))), options_(options),
      cache_(cache) {
  running_.reserve(batch_);
  inputs_.reserve(batch_);
  outputs_.reserve(batch_);
}

CallResult Batcher::run(std::span<const uint8_t> input, std::span<uint8_t> output) {
  Pending call;
  call.input = input;
  call.output = output;
  std::unique_lock lock(mutex_);
  queue_.push_back(&call);
  if (!busy_) {  // idle: the queue held nothing, so this call is its front
    busy_ = true;
    call.lead = true;
  }
  while (!call.done) {
    if (call.lead) {
      run_front(lock);  // the front batch holds this call: done afterwards
    } else {
      call.wake.wait(lock);
    }
  }
  return std::move(call.result);
}

void Batcher::run_front(std::unique_lock<std::mutex>& lock) {
  const size_t n = std::min(batch_, queue_.size());
  running_.assign(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  queue_.erase(queue_.begin(), queue_.begin() + static_cast<std::ptrdiff_t>(n));
  lock.unlock();

  inputs_.clear();
  outputs_.clear();
  for (Pending* p : running_) {
    inputs_.push_back(p->input);
    outputs_.push_back(p->output);
  }
  std::vector<CallResult> results;
  std::string failure;
  try {
    CallStats stats;
    results = run_calls(model_, layout_, inputs_, outputs_, options_, cache_, &stats);
    rows_computed_.fetch_add(stats.rows_computed, std::memory_order_relaxed);
    rows_reused_.fetch_add(stats.rows_reused, std::memory_order_relaxed);
  } catch (const std::bad_alloc&) {
    failure = "the server ran out of memory running this call";
  } catch (const std::exception& e) {
    failure = std::string("the model failed to run this call: ") + e.what();
  }
  bool computed = false;
  for (const CallResult& r : results) computed |= r.ok;
  if (computed) runs_.fetch_add(1, std::memory_order_relaxed);

  lock.lock();
  // Notified under the lock: once a waiter sees done it may return and destroy its Pending.
  for (size_t i = 0; i < n; ++i) {
    Pending* p = running_[i];
    if (i < results.size()) {
      p->result = std::move(results[i]);
    } else {
      p->result.ok = false;  // the connection names a failure without text
      try {
        p->result.error = failure;
      } catch (...) {
      }
    }
    p->done = true;
    p->wake.notify_one();
  }
  if (queue_.empty()) {
    busy_ = false;
  } else {
    queue_.front()->lead = true;
    queue_.front()->wake.notify_one();
  }
}

}  // namespace lockstep::serve
