// Code point ranges to UTF-8 byte sequences (utf8_ranges.hpp). A range of code points whose
// encodings have the same length splits until each piece is a product of byte ranges: the
// method of Russ Cox's RE2 and Rust's regex-syntax (utf8 sequences), written out here.
#include "grammar/utf8_ranges.hpp"

#include <algorithm>

namespace lockstep::grammar {
namespace {

// Sorted, merged, surrogates removed.
CodePointRanges normalized(CodePointRanges ranges) {
  CodePointRanges cut;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (lo < 0xD800 && hi > 0xDFFF) {
      cut.emplace_back(lo, 0xD7FF);
      cut.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && hi <= 0xDFFF) {
      continue;
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      cut.emplace_back(0xE000, hi);
    } else if (hi >= 0xD800 && hi <= 0xDFFF) {
      cut.emplace_back(lo, 0xD7FF);
    } else {
      cut.emplace_back(lo, hi);
    }
  }
  std::sort(cut.begin(), cut.end());
  CodePointRanges out;
  for (const auto& r : cut) {
    if (!out.empty() && r.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, r.second);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

size_t encoded_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

// [lo, hi], both of encoded length n, as byte-range products appended to `out`.
void split_same_length(uint32_t lo, uint32_t hi, size_t n, std::vector<std::vector<ByteSet>>& out) {
  for (size_t i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low bits the last i continuation bytes hold
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, n, out);
        split_same_length((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, n, out);
        split_same_length(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  const std::vector<uint8_t> a = utf8_bytes(lo), b = utf8_bytes(hi);
  std::vector<ByteSet> seq(n);
  for (size_t k = 0; k < n; ++k)
    for (unsigned v = a[k]; v <= b[k]; ++v) seq[k].set(v);
  out.push_back(std::move(seq));
}

}  // namespace

std::vector<uint8_t> utf8_bytes(uint32_t c) {
  if (c < 0x80) return {static_cast<uint8_t>(c)};
  if (c < 0x800) return {static_cast<uint8_t>(0xC0 | (c >> 6)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
  if (c < 0x10000)
    return {static_cast<uint8_t>(0xE0 | (c >> 12)), static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)),
            static_cast<uint8_t>(0x80 | (c & 0x3F))};
  return {static_cast<uint8_t>(0xF0 | (c >> 18)), static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F)),
          static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
}

CodePointRanges complement(const CodePointRanges& ranges) {
  CodePointRanges out;
  uint32_t next = 0;  // the first code point not yet covered
  for (const auto& [lo, hi] : normalized(ranges)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

std::vector<std::vector<ByteSet>> utf8_sequences(const CodePointRanges& ranges) {
  std::vector<std::vector<ByteSet>> out;
  ByteSet ascii;
  for (auto [lo, hi] : normalized(ranges)) {
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c) ascii.set(c);
    lo = std::max<uint32_t>(lo, 0x80);
    for (const uint32_t end : {0x7FFu, 0xFFFFu, kMaxCodePoint}) {  // the last code point of each length
      if (lo > hi) break;
      if (lo > end) continue;
      const uint32_t piece_hi = std::min(hi, end);
      split_same_length(lo, piece_hi, encoded_length(lo), out);
      lo = piece_hi + 1;
    }
  }
  if (ascii.any()) out.insert(out.begin(), std::vector<ByteSet>{ascii});
  return out;
}

}  // namespace lockstep::grammar
