// libFuzzer target: any bytes as a streamed completion's text, against the UTF-8 streamer every
// HTTP stream uses (src/serve/utf8_stream.hpp). The first byte chooses how the rest is cut into
// the pieces decoding hands it. Whatever the bytes and the cuts: every piece is valid UTF-8, the
// pieces together equal valid_utf8 of the whole (so the cuts change nothing), and bytes that are
// valid UTF-8 already come out unchanged.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "serve/utf8_stream.hpp"

namespace {

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "the UTF-8 streamer broke a promise: %s\n", promise);
  __builtin_trap();
}

// Whether `s` is valid UTF-8 (RFC 3629: shortest forms only, no surrogates, at most U+10FFFF),
// written out independently of the streamer.
bool valid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    int more = 0;
    uint32_t cp = 0, least = 0;
    if (b < 0x80) {
      ++i;
      continue;
    } else if ((b & 0xE0) == 0xC0) {
      more = 1, cp = b & 0x1F, least = 0x80;
    } else if ((b & 0xF0) == 0xE0) {
      more = 2, cp = b & 0x0F, least = 0x800;
    } else if ((b & 0xF8) == 0xF0) {
      more = 3, cp = b & 0x07, least = 0x10000;
    } else {
      return false;
    }
    if (i + static_cast<size_t>(more) >= s.size()) return false;  // the sequence is cut off
    for (int k = 1; k <= more; ++k) {
      const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((c & 0xC0) != 0x80) return false;
      cp = cp << 6 | (c & 0x3F);
    }
    if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += static_cast<size_t>(more) + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  uint32_t cuts = data[0] * 2654435761u + 1;  // a small generator of piece sizes
  lockstep::serve::Utf8Stream stream;
  std::string joined;
  for (size_t at = 0; at < bytes.size();) {
    cuts = cuts * 1103515245u + 12345u;
    const size_t piece = data[0] == 0 ? bytes.size() - at : std::min<size_t>(bytes.size() - at, 1 + (cuts >> 16) % 7);
    const std::string out = stream.push(bytes.substr(at, piece));
    if (!valid(out)) broken("every piece is valid UTF-8");
    joined += out;
    at += piece;
  }
  const std::string tail = stream.finish();
  if (!valid(tail)) broken("the end is valid UTF-8");
  joined += tail;
  if (joined != lockstep::serve::valid_utf8(bytes)) broken("the pieces equal the whole, whatever the cuts");
  if (valid(bytes) && joined != bytes) broken("valid UTF-8 comes out unchanged");
  return 0;
}
