#include "serve/frame_io.hpp"

#include <algorithm>
#include <cstring>

namespace lockstep::serve {

CallFrameParser::CallFrameParser(size_t call_bytes) : body_(call_bytes) {}

CallFrameParser::Step CallFrameParser::feed(std::span<const uint8_t> bytes) {
  size_t used = 0;
  if (state_ == State::prefix) {
    const size_t take = std::min(bytes.size(), prefix_.size() - prefix_got_);
    std::memcpy(prefix_.data() + prefix_got_, bytes.data(), take);
    prefix_got_ += take;
    used += take;
    if (prefix_got_ < prefix_.size()) return {used, Event::need_more};
    announced_ = decode_length(prefix_.data());
    if (announced_ != body_.size()) {
      state_ = State::wrong_length;
      return {used, Event::wrong_length};
    }
    state_ = State::body;
    body_got_ = 0;
  }
  if (state_ == State::body) {
    const size_t take = std::min(bytes.size() - used, body_.size() - body_got_);
    if (take > 0) std::memcpy(body_.data() + body_got_, bytes.data() + used, take);
    body_got_ += take;
    used += take;
    if (body_got_ < body_.size()) return {used, Event::need_more};
    state_ = State::call;
    return {used, Event::call};
  }
  return {0, state_ == State::call ? Event::call : Event::wrong_length};
}

void CallFrameParser::next() {
  if (state_ != State::call) return;
  state_ = State::prefix;
  prefix_got_ = 0;
}

std::array<uint8_t, frame_header_bytes + 1> answer_prefix(AnswerStatus status, size_t payload_bytes) {
  std::array<uint8_t, frame_header_bytes + 1> prefix{};
  encode_length(uint64_t{payload_bytes} + 1, prefix.data());
  prefix[frame_header_bytes] = static_cast<uint8_t>(status);
  return prefix;
}

std::vector<uint8_t> frame_of(std::span<const uint8_t> body) {
  std::vector<uint8_t> frame(frame_header_bytes + body.size());
  encode_length(body.size(), frame.data());
  if (!body.empty()) std::memcpy(frame.data() + frame_header_bytes, body.data(), body.size());
  return frame;
}

}  // namespace lockstep::serve
