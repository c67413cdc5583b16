// Bytes to valid UTF-8 text, incrementally: a streamed completion never splits a character.
// Bytes that may still complete a character wait; bytes that can never be part of a valid
// sequence come out as U+FFFD (one per maximal invalid subpart, as Unicode's "substitution of
// maximal subparts" recommends), so every piece is valid UTF-8 and JSON can carry it.
#pragma once

#include <string>
#include <string_view>

namespace lockstep::serve {

class Utf8Stream {
 public:
  // The text that the new bytes complete (possibly empty).
  std::string push(std::string_view bytes);
  // The end: bytes still waiting become U+FFFD.
  std::string finish();

 private:
  std::string pending_;  // a proper prefix of a valid sequence
};

// The whole of `bytes` as valid UTF-8 (push then finish).
std::string valid_utf8(std::string_view bytes);

}  // namespace lockstep::serve
