#include "serve/batcher.hpp"

#include <algorithm>
#include <exception>
#include <new>

namespace lockstep::serve {

Batcher::Batcher(const Model& model, const CallLayout& layout, int batch, const CallOptions& options,
                 PrefixCache* cache)
    : model_(model), layout_(layout), batch_(static_cast<size_t>(std::max(batch, 1))), options_(options),
      cache_(cache), runner_([this] { run_loop(); }) {}

Batcher::~Batcher() {
  {
    std::lock_guard lock(mutex_);
    quitting_ = true;
  }
  wake_.notify_one();
  runner_.join();
}

void Batcher::submit(std::span<const uint8_t> input, std::span<uint8_t> output, Completion done) {
  {
    std::lock_guard lock(mutex_);
    queue_.push_back({input, output, std::move(done)});
  }
  wake_.notify_one();
}

void Batcher::run_loop() noexcept {
  std::vector<Pending> calls;
  calls.reserve(batch_);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return quitting_ || !queue_.empty(); });
    if (queue_.empty()) return;  // quitting with nothing left to run
    const size_t n = std::min(batch_, queue_.size());
    calls.clear();
    for (size_t i = 0; i < n; ++i) {
      calls.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    lock.unlock();
    run_batch(calls);
    lock.lock();
  }
}

void Batcher::run_batch(std::vector<Pending>& calls) noexcept {
  std::vector<CallResult> results;
  std::string failure;
  try {
    std::vector<std::span<const uint8_t>> inputs;
    std::vector<std::span<uint8_t>> outputs;
    inputs.reserve(calls.size());
    outputs.reserve(calls.size());
    for (const Pending& p : calls) {
      inputs.push_back(p.input);
      outputs.push_back(p.output);
    }
    CallStats stats;
    results = run_calls(model_, layout_, inputs, outputs, options_, cache_, &stats);
    rows_computed_.fetch_add(stats.rows_computed, std::memory_order_relaxed);
    rows_reused_.fetch_add(stats.rows_reused, std::memory_order_relaxed);
  } catch (const std::bad_alloc&) {
    failure = "the server ran out of memory running this call";
  } catch (const std::exception& e) {
    try {
      failure = std::string("the model failed to run this call: ") + e.what();
    } catch (...) {
    }
  }
  bool computed = false;
  for (const CallResult& r : results) computed |= r.ok;
  if (computed) runs_.fetch_add(1, std::memory_order_relaxed);
  for (size_t i = 0; i < calls.size(); ++i) {
    CallResult result;
    if (i < results.size()) {
      result = std::move(results[i]);
    } else {
      result.ok = false;  // the connection names a failure without text
      try {
        result.error = failure;
      } catch (...) {
      }
    }
    calls[i].done(std::move(result));
  }
  calls.clear();
}

}  // namespace lockstep::serve
