// The queue and the batcher: one model, many callers, one run at a time.
//
// There is no batcher thread. A call that finds the model idle runs at once on its caller's
// thread, alone. Calls that arrive while a run is in progress wait in a FIFO queue; when the run
// ends, the thread that ran it wakes the caller at the queue's front, which becomes the next
// runner and takes up to `batch` calls from the front, its own first. So a lone call pays no
// thread hand-off, and a busy model takes its next batch as soon as it is free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <vector>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"

namespace lockstep::serve {

class Batcher {
 public:
  // `model` and `layout` must outlive the batcher. `batch` >= 1.
  // `cache` (null: none) must outlive the batcher too.
  Batcher(const Model& model, const CallLayout& layout, int batch, const CallOptions& options,
          PrefixCache* cache = nullptr);

  // Runs one call and returns when it is answered: `input` holds layout.input_bytes() bytes and
  // `output` receives layout.output_bytes(). Safe from any number of threads at once. The result
  // is what run_calls gives this call, so the outputs have the bits it would get alone.
  CallResult run(std::span<const uint8_t> input, std::span<uint8_t> output);

  // Runs of the model that computed at least one call.
  uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }
  // Rows the model computed, and rows the prefix cache supplied.
  uint64_t rows_computed() const { return rows_computed_.load(std::memory_order_relaxed); }
  uint64_t rows_reused() const { return rows_reused_.load(std::memory_order_relaxed); }

 private:
  struct Pending {
    std::span<const uint8_t> input;
    std::span<uint8_t> output;
    CallResult result;
    bool done = false;  // result is final
    bool lead = false;  // this caller runs the next batch
    std::condition_variable wake;
  };

  // Takes up to batch_ calls from the queue's front (the caller's own is first), runs them with
  // the lock released, publishes the results and passes the lead on. Called with mutex_ held.
  void run_front(std::unique_lock<std::mutex>& lock);

  const Model& model_;
  const CallLayout& layout_;
  const size_t batch_;
  const CallOptions options_;
  PrefixCache* const cache_;

  std::mutex mutex_;
  std::deque<Pending*> queue_;  // waiting, oldest first; non-empty only while busy_
  bool busy_ = false;           // a caller holds the lead
  // The current runner's scratch, touched only by the caller holding the lead.
  std::vector<Pending*> running_;
  std::vector<std::span<const uint8_t>> inputs_;
  std::vector<std::span<uint8_t>> outputs_;
  std::atomic<uint64_t> runs_{0};
  std::atomic<uint64_t> rows_computed_{0};
  std::atomic<uint64_t> rows_reused_{0};
};

}  // namespace lockstep::serve
