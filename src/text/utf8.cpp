// text/utf8.hpp.
#include "text/utf8.hpp"

namespace lockstep::text {

namespace {

// The length of the valid UTF-8 prefix of a sequence starting at s[at] (Unicode's table 3-7):
// the whole sequence's length when valid, else how many of its bytes are a valid start (>= 1
// for the replacement, as Rust's from_utf8_lossy counts a maximal subpart).
size_t utf8_prefix(std::string_view s, size_t at, bool* valid) {
  const auto byte = [&](size_t i) { return at + i < s.size() ? static_cast<unsigned char>(s[at + i]) : 0x100; };
  const unsigned c = byte(0);
  *valid = true;
  if (c < 0x80) return 1;
  size_t need = 0;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c == 0xE0) need = 2, lo = 0xA0;
  else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) need = 2;
  else if (c == 0xED) need = 2, hi = 0x9F;
  else if (c == 0xF0) need = 3, lo = 0x90;
  else if (c >= 0xF1 && c <= 0xF3) need = 3;
  else if (c == 0xF4) need = 3, hi = 0x8F;
  else return *valid = false, 1;
  for (size_t i = 1; i <= need; ++i) {
    const unsigned n = byte(i);
    if (n < (i == 1 ? lo : 0x80u) || n > (i == 1 ? hi : 0xBFu)) return *valid = false, i;
  }
  return need + 1;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  for (size_t at = 0; at < s.size();) {
    bool ok = false;
    at += utf8_prefix(s, at, &ok);
    if (!ok) return false;
  }
  return true;
}

std::string lossy_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t at = 0; at < bytes.size();) {
    bool ok = false;
    const size_t n = utf8_prefix(bytes, at, &ok);
    if (ok)
      out.append(bytes.substr(at, n));
    else
      out.append("\xEF\xBF\xBD");
    at += n;
  }
  return out;
}

}  // namespace lockstep::text
