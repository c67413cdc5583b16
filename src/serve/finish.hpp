// How a generation ended: the OpenAI finish_reason of its last event, and the label of
// lockstep_request_success_total.
#pragma once

#include <cstddef>

namespace lockstep::serve {

enum class Finish { length, stop, abort, error };
constexpr size_t kFinishReasons = 4;
static_assert(static_cast<size_t>(Finish::error) + 1 == kFinishReasons);

constexpr const char* finish_name(Finish f) {
  switch (f) {
    case Finish::length: return "length";
    case Finish::stop: return "stop";
    case Finish::abort: return "abort";
    case Finish::error: return "error";
  }
  return "error";
}

}  // namespace lockstep::serve
