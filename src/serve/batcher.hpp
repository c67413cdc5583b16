// The queue and the batcher: one model, many connections, one run at a time.
//
// Connections submit calls and go back to their event loop; they never wait for the model. One
// runner thread takes up to `batch` calls from the front of the FIFO queue, runs them together
// with run_calls and hands each result to its call's completion. Calls that arrive while a run
// is in progress wait and go into the next run together; a call that finds the runner idle runs
// at once, alone. The I/O threads are never blocked by the model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "lockstep/call.hpp"
#include "lockstep/model.hpp"

namespace lockstep::serve {

class Batcher {
 public:
  // Called on the runner thread with the call's result; it must not throw and should only hand
  // the result over (post it to the connection's executor), not block.
  using Completion = std::function<void(CallResult)>;

  // `model`, `layout` and `cache` (null: none) must outlive the batcher. `batch` >= 1.
  // Starts the runner thread (throws std::system_error when it cannot).
  Batcher(const Model& model, const CallLayout& layout, int batch, const CallOptions& options,
          PrefixCache* cache = nullptr);
  // Runs the calls still queued, then ends the runner.
  ~Batcher();
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues one call: `input` holds layout.input_bytes() bytes and `output` receives
  // layout.output_bytes(); both must stay valid until `done` is called. The result is what
  // run_calls gives this call, so the outputs have the bits it would get alone. Any thread.
  void submit(std::span<const uint8_t> input, std::span<uint8_t> output, Completion done);

  // Runs of the model that computed at least one call.
  uint64_t runs() const { return runs_.load(std::memory_order_relaxed); }
  // Rows the model computed, and rows the prefix cache supplied.
  uint64_t rows_computed() const { return rows_computed_.load(std::memory_order_relaxed); }
  uint64_t rows_reused() const { return rows_reused_.load(std::memory_order_relaxed); }

 private:
  struct Pending {
    std::span<const uint8_t> input;
    std::span<uint8_t> output;
    Completion done;
  };

  void run_loop() noexcept;
  // Runs `calls` as one run and completes each.
  void run_batch(std::vector<Pending>& calls) noexcept;

  const Model& model_;
  const CallLayout& layout_;
  const size_t batch_;
  const CallOptions options_;
  PrefixCache* const cache_;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Pending> queue_;  // oldest first
  bool quitting_ = false;
  std::atomic<uint64_t> runs_{0};
  std::atomic<uint64_t> rows_computed_{0};
  std::atomic<uint64_t> rows_reused_{0};
  std::thread runner_;  // last: starts once the members above exist
};

}  // namespace lockstep::serve
