// How a generation ended: the OpenAI finish_reason of its last event, and the label of
// lockstep_request_success_total.
#pragma once

#include <cstddef>

namespace lockstep::serve {

// eos: the model generated one of its end-of-sequence ids (model.json's eos_token_ids).
enum class Finish { length, stop, eos, abort, error };
constexpr size_t kFinishReasons = 5;
static_assert(static_cast<size_t>(Finish::error) + 1 == kFinishReasons);

// The OpenAI finish_reason: an end-of-sequence id is "stop", as OpenAI and vLLM say.
constexpr const char* finish_name(Finish f) {
  switch (f) {
    case Finish::length: return "length";
    case Finish::stop: return "stop";
    case Finish::eos: return "stop";
    case Finish::abort: return "abort";
    case Finish::error: return "error";
  }
  return "error";
}

// The metrics' finished_reason label: an end-of-sequence id apart from a stop string ("eos").
constexpr const char* finish_label(Finish f) { return f == Finish::eos ? "eos" : finish_name(f); }

}  // namespace lockstep::serve
