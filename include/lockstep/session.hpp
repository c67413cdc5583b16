// An incremental session over a model: it appends tokens, keeps every layer's keys and values,
// and returns the outputs at the last position, bit for bit what a full forward pass gives at
// that position (docs/ARITHMETIC.md: position t reads only positions <= t).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "lockstep/kv_pool.hpp"
#include "lockstep/model.hpp"

namespace lockstep {

class Session {
 public:
  // An empty session on `model`; `call` chooses the device and threads its appends use. On the
  // reference device a session keeps only its tokens and recomputes from position 0 each time.
  explicit Session(std::shared_ptr<const Model> model, const CallOptions& call = {});
  // Its keys and values (one window) a slab of `pool` (made for this model's shape; null: its
  // own allocation), taken on the first cpu append and given back when the session goes; forks
  // take theirs from the same pool. A pool past its budget has a prefix cache sharing it evict.
  Session(std::shared_ptr<const Model> model, const CallOptions& call, std::shared_ptr<KvPool> pool);
  ~Session();
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;

  // Appends tokens (at least one; the total at most the window) and writes the logits
  // [vocab] and/or hidden state [d_model] of the last appended position where not null.
  // A bad token or a full window throws Error and leaves the session as it was.
  void append(std::span<const int32_t> tokens, float* logits, float* hidden = nullptr);
  std::vector<float> append(std::span<const int32_t> tokens);  // the logits

  // A new session holding this one's first `length` positions (all when -1), sharing nothing.
  Session fork(int32_t length = -1) const;
  // Forgets every position from `length` on.
  void truncate(int32_t length);

  int32_t length() const;
  std::span<const int32_t> tokens() const;
  const Model& model() const;
  size_t memory_bytes() const;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Appends to several sessions in one forward pass: their rows go through each matmul together.
// Each session gets the bits it would get alone. All sessions must share one model.
struct SessionStep {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  float* logits = nullptr;  // [vocab] at the last appended position, or null
  float* hidden = nullptr;  // [d_model], or null
};
void append_batch(std::span<const SessionStep> steps, const CallOptions& call = {});

}  // namespace lockstep
