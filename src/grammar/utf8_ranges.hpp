// Character classes as UTF-8 byte sequences: a set of code points becomes alternatives, each a
// sequence of byte sets, that together match exactly the UTF-8 encodings of those code points
// (surrogates excluded; they have no UTF-8 form).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "grammar/rules.hpp"

namespace lockstep::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Inclusive code point ranges, in any order, possibly overlapping.
using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;

// The complement within [0, 0x10FFFF].
CodePointRanges complement(const CodePointRanges& ranges);

// The byte sequences of the ranges: all one-byte characters joined into one sequence of one set
// (first, when there are any), then the longer ones.
std::vector<std::vector<ByteSet>> utf8_sequences(const CodePointRanges& ranges);

// The UTF-8 bytes of one code point.
std::vector<uint8_t> utf8_bytes(uint32_t code_point);

}  // namespace lockstep::grammar
