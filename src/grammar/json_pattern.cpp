// A regex subset to GBNF over a JSON string's contents (json_pattern.hpp): a recursive descent
// over the pattern's code points, each character set written as GBNF classes of the characters
// a JSON string holds as they are, and escapes for the others.
#include "grammar/json_pattern.hpp"

#include <cstdio>
#include <vector>

#include "grammar/utf8_ranges.hpp"
#include "lockstep/error.hpp"

namespace lockstep::grammar {
namespace {

constexpr int64_t kMaxPatternRepeat = 100;

class PatternReader {
 public:
  PatternReader(const std::string& pattern, const std::string& where) : where_(where) {
    // The pattern as code points (it came from JSON: valid UTF-8).
    for (size_t i = 0; i < pattern.size();) {
      const unsigned char c = static_cast<unsigned char>(pattern[i]);
      const size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
      for (size_t k = 1; k < len && i + k < pattern.size(); ++k) v = (v << 6) | (static_cast<unsigned char>(pattern[i + k]) & 0x3F);
      text_.push_back(v);
      i += len;
    }
  }

  std::string run() {
    const bool anchored_start = !text_.empty() && text_[0] == '^';
    if (anchored_start) ++pos_;
    std::string body = alternatives();
    bool anchored_end = false;
    if (pos_ < text_.size() && text_[pos_] == '$' && pos_ + 1 == text_.size()) {
      anchored_end = true;
      ++pos_;
    }
    if (pos_ < text_.size()) refuse(text_[pos_] == ')' ? "an unmatched ')'" : "'^' or '$' not at an end");
    return (anchored_start ? "" : "json-char* ") + std::string("(") + body + ")" + (anchored_end ? "" : " json-char*");
  }

 private:
  [[noreturn]] void refuse(const std::string& what) const {
    throw Error(ErrorKind::invalid_argument, "schema: " + (where_.empty() ? std::string("/") : where_) + ": 'pattern' " +
                                                 what + " at character " + std::to_string(pos_ + 1) +
                                                 " is not supported");
  }
  bool more() const { return pos_ < text_.size(); }
  uint32_t peek() const { return text_[pos_]; }

  std::string alternatives() {
    std::string out = sequence();
    while (more() && peek() == '|') {
      ++pos_;
      out += " | " + sequence();
    }
    return out;
  }

  std::string sequence() {
    std::string out;
    while (more() && peek() != '|' && peek() != ')' && !(peek() == '$' && pos_ + 1 == text_.size())) {
      std::string item = atom();
      if (more() && (peek() == '?' || peek() == '*' || peek() == '+' || peek() == '{')) item = quantified(item);
      out += (out.empty() ? "" : " ") + item;
    }
    return out.empty() ? "\"\"" : out;
  }

  int64_t number() {
    const size_t start = pos_;
    int64_t v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxPatternRepeat) refuse("a repetition count above " + std::to_string(kMaxPatternRepeat));
      ++pos_;
    }
    if (pos_ == start) refuse("a '{' that is not a repetition {m,n}");
    return v;
  }

  std::string quantified(const std::string& item) {
    const uint32_t q = peek();
    ++pos_;
    std::string out;
    if (q == '{') {
      const int64_t lo = number();
      std::string hi;
      if (more() && peek() == ',') {
        ++pos_;
        if (more() && peek() != '}') hi = std::to_string(number());
        out = "(" + item + "){" + std::to_string(lo) + "," + hi + "}";
      } else {
        out = "(" + item + "){" + std::to_string(lo) + "}";
      }
      if (!more() || peek() != '}') refuse("a repetition without its '}'");
      ++pos_;
    } else {
      out = "(" + item + ")" + std::string(1, static_cast<char>(q));
    }
    if (more() && (peek() == '?' || peek() == '+')) refuse("a lazy or possessive quantifier");
    if (more() && (peek() == '*' || peek() == '{')) refuse("a quantifier of a quantifier");
    return out;
  }

  std::string atom() {
    const uint32_t c = peek();
    if (c == '(') {
      ++pos_;
      if (more() && peek() == '?') {
        if (pos_ + 1 < text_.size() && text_[pos_ + 1] == ':') {
          pos_ += 2;
        } else {
          refuse("a group other than (...) and (?:...)");
        }
      }
      std::string inner = alternatives();
      if (!more() || peek() != ')') refuse("a group without its ')'");
      ++pos_;
      return "(" + inner + ")";
    }
    if (c == '[') return set_text(char_class());
    if (c == '.') {  // any character but line ends (ECMAScript's four; Python's re leaves out \n alone)
      ++pos_;
      return set_text(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '\\') return set_text(escape(false));
    if (c == '*' || c == '+' || c == '?' || c == '{' || c == '^' || c == '$') refuse(std::string("a '") + static_cast<char>(c) + "' here");
    ++pos_;
    return set_text({{c, c}});
  }

  // An escape after '\': a set of code points. `widest`: inside a negated class, where the class
  // escapes stand for the most any dialect puts in them, so that what the class leaves is in both.
  CodePointRanges escape(bool in_class, bool widest = false) {
    ++pos_;
    if (!more()) refuse("a '\\' at the end");
    const uint32_t e = peek();
    ++pos_;
    const CodePointRanges digits = {{'0', '9'}}, word = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    // JSON Schema's regexes are ECMAScript's; validators often use another engine (Python's re:
    // Unicode \d, \w and \s). Each class here is what both take: \s without U+FEFF (ECMAScript's
    // alone), \S outside either's spaces, \D and \W the ASCII characters outside \d and \w.
    const CodePointRanges space = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                   {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}};
    CodePointRanges any_space = space;
    any_space.insert(any_space.end(), {{0x1C, 0x1F}, {0x85, 0x85}, {0xFEFF, 0xFEFF}});
    const auto ascii_outside = [](CodePointRanges in) {
      in.emplace_back(0x80, kMaxCodePoint);
      return complement(in);
    };
    const auto with_non_ascii = [](CodePointRanges in) {
      in.emplace_back(0x80, kMaxCodePoint);
      return in;
    };
    switch (e) {
      case 'd': return widest ? with_non_ascii(digits) : digits;
      case 'D': return widest ? with_non_ascii(ascii_outside(digits)) : ascii_outside(digits);
      case 'w': return widest ? with_non_ascii(word) : word;
      case 'W': return widest ? with_non_ascii(ascii_outside(word)) : ascii_outside(word);
      case 's': return widest ? any_space : space;
      case 'S': return complement(widest ? space : any_space);
      case 't': return {{'\t', '\t'}};
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case 'u': {
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
          if (!more()) refuse("a \\u escape without 4 hexadecimal digits");
          const uint32_t h = peek();
          const int d = h >= '0' && h <= '9' ? static_cast<int>(h - '0') : h >= 'a' && h <= 'f' ? static_cast<int>(h - 'a' + 10)
                        : h >= 'A' && h <= 'F' ? static_cast<int>(h - 'A' + 10) : -1;
          if (d < 0) refuse("a \\u escape without 4 hexadecimal digits");
          v = v * 16 + static_cast<uint32_t>(d);
          ++pos_;
        }
        return {{v, v}};
      }
      default:
        break;
    }
    // Escaped punctuation stands for itself; a letter or digit escape is something else.
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9') || (in_class && e == 'b')) {
      pos_ -= 2;  // at the backslash
      refuse(std::string("the escape '\\") + static_cast<char>(e) + "'");
    }
    return {{e, e}};
  }

  CodePointRanges char_class() {
    const size_t open = pos_;
    ++pos_;
    const bool negated = more() && peek() == '^';
    if (negated) ++pos_;
    CodePointRanges ranges;
    bool first = true;
    while (true) {
      if (!more()) {
        pos_ = open;
        refuse("a class without its ']'");
      }
      if (peek() == ']' && !first) break;
      first = false;
      CodePointRanges item;
      if (peek() == '\\') {
        item = escape(true, negated);
      } else {
        item = {{peek(), peek()}};
        ++pos_;
      }
      if (item.size() == 1 && item[0].first == item[0].second && more() && peek() == '-' && pos_ + 1 < text_.size() &&
          text_[pos_ + 1] != ']') {
        ++pos_;
        CodePointRanges end;
        if (peek() == '\\') {
          end = escape(true);
        } else {
          end = {{peek(), peek()}};
          ++pos_;
        }
        if (end.size() != 1 || end[0].first != end[0].second || end[0].first < item[0].first) refuse("a range");
        item = {{item[0].first, end[0].first}};
      }
      ranges.insert(ranges.end(), item.begin(), item.end());
    }
    ++pos_;
    return negated ? complement(ranges) : ranges;
  }

  // GBNF for one character of `set` as a JSON string holds it: the characters written as they
  // are in one class, then the escapes of ", \ and control characters the set holds.
  static std::string set_text(const CodePointRanges& set) {
    std::vector<std::string> alts;
    CodePointRanges plain;
    bool quote = false, backslash = false;
    std::vector<uint32_t> controls;
    for (const auto& [lo, hi] : set) {
      for (uint32_t c = lo; c <= hi && c < 0x20; ++c) controls.push_back(c);
      if (lo <= '"' && '"' <= hi) quote = true;
      if (lo <= '\\' && '\\' <= hi) backslash = true;
      uint32_t a = std::max<uint32_t>(lo, 0x20);
      while (a <= hi) {  // cut out '"' and '\'
        uint32_t b = hi;
        if (a <= '"' && '"' <= b) b = a == '"' ? '"' : '"' - 1;
        if (a <= '\\' && '\\' <= b) b = a == '\\' ? '\\' : '\\' - 1;
        if (a != '"' && a != '\\') plain.emplace_back(a, b);
        if (b == kMaxCodePoint) break;
        a = b + 1;
      }
    }
    if (!plain.empty()) {
      std::string cls = "[";
      char buf[32];
      for (const auto& [lo, hi] : plain) {
        std::snprintf(buf, sizeof buf, "\\U%08X", lo);
        cls += buf;
        if (hi != lo) {
          std::snprintf(buf, sizeof buf, "-\\U%08X", hi);
          cls += buf;
        }
      }
      alts.push_back(cls + "]");
    }
    if (quote) alts.push_back("\"\\\\\\\"\"");
    if (backslash) alts.push_back("\"\\\\\\\\\"");
    for (const uint32_t c : controls) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "\"\\\\u%04x\"", c);
      alts.push_back(buf);
    }
    if (alts.empty()) return "json-never";
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  std::string where_;
  std::vector<uint32_t> text_;
  size_t pos_ = 0;
};

}  // namespace

std::string pattern_to_gbnf(const std::string& pattern, const std::string& where) {
  return PatternReader(pattern, where).run();
}

}  // namespace lockstep::grammar
