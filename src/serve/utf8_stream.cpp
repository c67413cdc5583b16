#include "serve/utf8_stream.hpp"

#include <cstdint>

namespace lockstep::serve {
namespace {

constexpr std::string_view replacement = "\xEF\xBF\xBD";

// The length of the sequence lead byte `b` starts, 0 when it cannot start one.
int sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

// Whether `b` may follow lead byte `lead` as the second byte (RFC 3629's table).
bool second_ok(uint8_t lead, uint8_t b) {
  if (lead == 0xE0) return b >= 0xA0 && b <= 0xBF;
  if (lead == 0xED) return b >= 0x80 && b <= 0x9F;
  if (lead == 0xF0) return b >= 0x90 && b <= 0xBF;
  if (lead == 0xF4) return b >= 0x80 && b <= 0x8F;
  return b >= 0x80 && b <= 0xBF;
}

}  // namespace

std::string Utf8Stream::push(std::string_view bytes) {
  std::string out;
  for (char c : bytes) {
    const uint8_t b = static_cast<uint8_t>(c);
    for (;;) {
      if (pending_.empty()) {
        const int n = sequence_length(b);
        if (n == 1) out += c;
        else if (n == 0) out += replacement;
        else pending_ += c;
        break;
      }
      const uint8_t lead = static_cast<uint8_t>(pending_[0]);
      const bool ok = pending_.size() == 1 ? second_ok(lead, b) : (b >= 0x80 && b <= 0xBF);
      if (!ok) {  // the waiting bytes are a maximal invalid subpart; b starts afresh
        out += replacement;
        pending_.clear();
        continue;
      }
      pending_ += c;
      if (static_cast<int>(pending_.size()) == sequence_length(lead)) {
        out += pending_;
        pending_.clear();
      }
      break;
    }
  }
  return out;
}

std::string Utf8Stream::finish() {
  std::string out = pending_.empty() ? std::string() : std::string(replacement);
  pending_.clear();
  return out;
}

std::string valid_utf8(std::string_view bytes) {
  Utf8Stream s;
  std::string out = s.push(bytes);
  out += s.finish();
  return out;
}

}  // namespace lockstep::serve
