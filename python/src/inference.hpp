// The state behind lockstep.LanguageModelInference, shared by the files that bind its methods.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "convert.hpp"
#include "lockstep/chat_template.hpp"
#include "lockstep/model.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep::python {

struct Inference {
  std::shared_ptr<const Model> model;
  bool threaded = true;        // the instance's device: cpu (true) or reference (false)
  std::optional<int> threads;  // the instance's thread count; none: one per physical core
  // The packed format of the named parameters given to the constructor (lockstep.lowbit);
  // empty: the model's own (model.json's for a loaded model, else "float32").
  std::string given_format;
  // The tokenizer model.json names (from_checkpoint); null: none, or built from parameters.
  std::shared_ptr<Tokenizer> tokenizer;
  // The chat template model.json names (from_checkpoint); null: none (the built-in one is used).
  std::shared_ptr<ChatTemplate> chat_template;

  std::string weight_format() const { return given_format.empty() ? model->weight_format() : given_format; }

  const ModelConfig& config() const { return model->config(); }

  // The options of one call: each argument overrides the instance's setting when not None.
  CallOptions call(py::handle threaded_arg, py::handle threads_arg) const {
    CallOptions o;
    o.device = threaded_override(threaded_arg).value_or(threaded) ? Device::cpu : Device::reference;
    if (const std::optional<int> t = threads_count(threads_arg)) o.threads = t;
    else if (threads) o.threads = threads;
    return o;
  }

  std::string window() const { return "[batch, 1.." + std::to_string(config().length) + "]"; }
  std::string loss_layout() const {
    return "[" + std::to_string(config().batch) + ", " + std::to_string(config().length + 1) + "]";
  }
};

}  // namespace lockstep::python
