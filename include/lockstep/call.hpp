// A call's bytes: the inputs and outputs of one record, raw, as the serve protocol and
// `lockstep call` carry them (docs/PROTOCOL.md). Tensors are little-endian, row-major, with no
// header: the shapes are fixed by the model and the flags.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "lockstep/prefix_cache.hpp"

namespace lockstep {

class CallLayout {
 public:
  // `outputs`: names among the model's outputs, in the order wanted (every output when empty).
  // `at`: the inputs gain a last `at` i32 [1], and each output keeps only that position of its
  // second axis. An unknown or repeated name throws Error listing the model's outputs.
  CallLayout(const ModelConfig& config, std::vector<std::string> outputs, bool at);

  const std::vector<TensorSpec>& inputs() const { return inputs_; }
  const std::vector<TensorSpec>& outputs() const { return outputs_; }
  bool at() const { return at_; }
  bool wants_logits() const { return logits_index_ >= 0; }
  bool wants_hidden() const { return hidden_index_ >= 0; }
  size_t input_bytes() const { return input_bytes_; }
  size_t output_bytes() const { return output_bytes_; }

  // Where each output starts in a call's answer; -1 when not asked for.
  int64_t logits_offset() const;
  int64_t hidden_offset() const;

 private:
  ModelConfig config_;
  std::vector<TensorSpec> inputs_, outputs_;
  bool at_ = false;
  int logits_index_ = -1, hidden_index_ = -1;
  size_t input_bytes_ = 0, output_bytes_ = 0;
};

// What a batch of calls computed: rows the model ran, and rows a prefix cache supplied instead.
struct CallStats {
  uint64_t rows_computed = 0;
  uint64_t rows_reused = 0;
};

struct CallResult {
  bool ok = false;
  std::string error;  // what was wrong with this call's input, when !ok
};

// Runs the calls as one batch: inputs[i] holds layout.input_bytes() bytes, outputs[i] receives
// layout.output_bytes(). A call with a bad input (wrong size, an id out of range, `at` outside the
// window) gets its own error and the others run. Only what the layout asks for is computed: no
// output head without logits, no position after `at`. Every answer has the bits the call would
// get alone.
//
// With a cache (on the cpu device), a call whose outputs start at position p reuses the longest
// cached prefix of its tokens up to p and computes only the rows after it; every call's rows are
// then cached for later calls. The bits are the same with or without it.
std::vector<CallResult> run_calls(const Model& model, const CallLayout& layout,
                                  std::span<const std::span<const uint8_t>> inputs,
                                  std::span<const std::span<uint8_t>> outputs,
                                  const CallOptions& options = {}, PrefixCache* cache = nullptr,
                                  CallStats* stats = nullptr);

}  // namespace lockstep
