// The protocol's wire constants (docs/PROTOCOL.md), with no dependency on the model: every
// message either way is a frame, a little-endian u64 byte count then that many bytes; an answer's
// body starts with a status byte.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lockstep::serve {

inline constexpr size_t frame_header_bytes = 8;

enum class AnswerStatus : uint8_t {
  ok = 0,     // the outputs follow, in the order the handshake lists them
  error = 1,  // UTF-8 text naming what was wrong follows
};

// u64 little-endian <-> 8 bytes.
inline void encode_length(uint64_t length, uint8_t out[frame_header_bytes]) noexcept {
  for (size_t i = 0; i < frame_header_bytes; ++i) out[i] = static_cast<uint8_t>(length >> (8 * i));
}

inline uint64_t decode_length(const uint8_t in[frame_header_bytes]) noexcept {
  uint64_t n = 0;
  for (size_t i = 0; i < frame_header_bytes; ++i) n |= static_cast<uint64_t>(in[i]) << (8 * i);
  return n;
}

}  // namespace lockstep::serve
