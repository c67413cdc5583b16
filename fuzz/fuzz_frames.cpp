// libFuzzer target: any bytes as what a client sends the server, against the frame parser every
// connection uses (src/serve/frame_io.hpp). The first two bytes choose the call's size (the
// layout's input bytes, 0..4096) and the third how the rest is cut into the pieces a socket
// might deliver. Whatever the bytes and the cuts, the parser must find exactly the frames a
// whole-stream reading finds: the same call bodies in order, then the same end (the wrong length
// it announced, or a partial frame, or nothing pending), never reading past what it was given.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "serve/frame_io.hpp"

namespace {

using lockstep::serve::CallFrameParser;
using lockstep::serve::decode_length;
using lockstep::serve::frame_header_bytes;

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "the frame parser broke a promise: %s\n", promise);
  __builtin_trap();
}

struct Reading {
  std::vector<std::string> calls;
  bool wrong_length = false;
  uint64_t announced = 0;
  bool partial = false;
};

// The stream read whole, the obvious way.
Reading read_whole(const uint8_t* p, size_t n, size_t call_bytes) {
  Reading r;
  size_t at = 0;
  while (n - at >= frame_header_bytes) {
    const uint64_t length = decode_length(p + at);
    if (length != call_bytes) {
      r.wrong_length = true;
      r.announced = length;
      return r;
    }
    if (n - at - frame_header_bytes < call_bytes) break;
    r.calls.emplace_back(reinterpret_cast<const char*>(p + at + frame_header_bytes), call_bytes);
    at += frame_header_bytes + call_bytes;
  }
  r.partial = at < n;
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const size_t call_bytes = (size_t{data[0]} | size_t{data[1]} << 8) % 4097;
  uint32_t cuts = data[2] * 2654435761u + 1;  // a small generator of piece sizes
  const uint8_t* stream = data + 3;
  const size_t n = size - 3;
  const Reading want = read_whole(stream, n, call_bytes);

  CallFrameParser parser(call_bytes);
  Reading got;
  size_t at = 0;
  bool ended = false;
  while (at < n && !ended) {
    cuts = cuts * 1103515245u + 12345u;
    const size_t piece = data[2] == 0 ? n - at : std::min<size_t>(n - at, 1 + (cuts >> 16) % 97);
    // The piece is copied to a buffer of its exact size, so that AddressSanitizer catches any
    // read past what the parser was given.
    const std::vector<uint8_t> buffer(stream + at, stream + at + piece);
    size_t offset = 0;
    while (offset < piece) {
      const auto step = parser.feed({buffer.data() + offset, piece - offset});
      if (step.consumed > piece - offset) broken("it takes no more than it is given");
      offset += step.consumed;
      if (step.event == CallFrameParser::Event::call) {
        if (parser.input().size() != call_bytes) broken("a call's body has the call's size");
        got.calls.emplace_back(reinterpret_cast<const char*>(parser.input().data()), call_bytes);
        if (parser.feed({buffer.data() + offset, piece - offset}).consumed != 0)
          broken("it takes nothing between a call and next()");
        if (parser.partial()) broken("a whole call is not a partial frame");
        parser.next();
      } else if (step.event == CallFrameParser::Event::wrong_length) {
        got.wrong_length = true;
        got.announced = parser.announced();
        if (parser.feed({buffer.data() + offset, piece - offset}).consumed != 0)
          broken("it takes nothing after a wrong length");
        ended = true;
        break;
      } else if (offset != piece) {
        broken("need_more means every byte given was taken");
      }
    }
    at += piece;
  }
  if (!ended) got.partial = parser.partial();
  if (got.calls != want.calls) broken("the same calls as a whole-stream reading, in order");
  if (got.wrong_length != want.wrong_length || got.announced != want.announced)
    broken("the same wrong length as a whole-stream reading");
  if (!ended && got.partial != want.partial) broken("partial() says whether a frame is pending");
  return 0;
}
