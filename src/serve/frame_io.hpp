// The pure side of the frames (docs/PROTOCOL.md): bytes in, events out, no I/O. The connection
// (connection.cpp) reads whatever the socket gives into its read buffer and feeds it here; the
// fuzzer (fuzz/fuzz_frames.cpp) feeds arbitrary bytes in arbitrary pieces.
//
// Nothing here allocates from what the peer sends: the body buffer has the call's size, fixed by
// the layout, and a frame announcing any other length is refused from its 8-byte prefix alone.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "serve/wire.hpp"

namespace lockstep::serve {

class CallFrameParser {
 public:
  enum class Event {
    need_more,     // every byte given was taken; the frame is not complete
    call,          // a whole call frame: its body is input() until next()
    wrong_length,  // the prefix announced announced() bytes, not the call's size
  };
  struct Step {
    size_t consumed;  // bytes taken from the front of what was fed
    Event event;
  };

  // `call_bytes`: the layout's input bytes, the only body length a call frame may announce.
  explicit CallFrameParser(size_t call_bytes);

  // Takes bytes from the front of `bytes` until a frame is complete or they run out. After
  // `call` it takes nothing until next(); after `wrong_length` nothing ever (the body is never
  // read: the connection answers the error and ends).
  Step feed(std::span<const uint8_t> bytes);
  // Done with the call in input(): the next byte fed starts the next frame.
  void next();

  // Some bytes of a frame have come, not all (what the idle timeout measures).
  bool partial() const { return state_ == State::prefix ? prefix_got_ > 0 : state_ == State::body; }
  std::span<const uint8_t> input() const { return body_; }
  uint64_t announced() const { return announced_; }

 private:
  enum class State { prefix, body, call, wrong_length };
  State state_ = State::prefix;
  std::array<uint8_t, frame_header_bytes> prefix_{};
  size_t prefix_got_ = 0;
  uint64_t announced_ = 0;
  std::vector<uint8_t> body_;
  size_t body_got_ = 0;
};

// The 9 bytes before an answer's payload: the frame's length (1 + payload) and the status byte.
std::array<uint8_t, frame_header_bytes + 1> answer_prefix(AnswerStatus status, size_t payload_bytes);

// A whole frame around `body`, such as the handshake.
std::vector<uint8_t> frame_of(std::span<const uint8_t> body);

}  // namespace lockstep::serve
