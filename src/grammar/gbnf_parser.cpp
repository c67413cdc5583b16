// The GBNF reader (gbnf.hpp): a recursive descent over the text, building RulesBuilder rules.
#include "grammar/gbnf.hpp"

#include <string>

#include "grammar/utf8_ranges.hpp"
#include "lockstep/error.hpp"

namespace lockstep::grammar {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Rules parse(std::string_view root) {
    skip_space(true);
    if (at_end()) fail("the grammar is empty; it needs at least a rule 'root ::= ...'");
    while (!at_end()) parse_rule();
    try {
      return builder_.finish(std::string(root));
    } catch (const Error& e) {
      throw Error(ErrorKind::invalid_argument, std::string("grammar: ") + e.what());
    }
  }

 private:
  bool at_end() const { return pos_ >= text_.size(); }
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }

  [[noreturn]] void fail(const std::string& what) const { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t at, const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error(ErrorKind::invalid_argument,
                "grammar: line " + std::to_string(line) + ", column " + std::to_string(column) + ": " + what);
  }

  // Spaces and comments; newlines too when `newlines` (inside parentheses, after ::= and |).
  void skip_space(bool newlines) {
    while (!at_end()) {
      const char c = peek();
      if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else if (c == '#') {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t start = pos_;
    while (!at_end() && is_name_char(peek())) ++pos_;
    if (pos_ == start) fail("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  void parse_rule() {
    const size_t at = pos_;
    const std::string name = parse_name();
    skip_space(false);
    if (text_.substr(pos_, 3) != "::=") fail("expected '::=' after the rule name '" + name + "'");
    pos_ += 3;
    skip_space(true);
    const uint32_t id = builder_.rule(name);
    if (builder_.defined(id)) fail_at(at, "the rule '" + name + "' is defined twice");
    builder_.define(id, parse_alternatives(name, false));
    if (peek() == '\r') ++pos_;
    if (peek() == '\n') {
      ++pos_;
    } else if (!at_end()) {
      fail(std::string("expected the end of the line, found '") + peek() + "'");
    }
    skip_space(true);
  }

  std::vector<Sequence> parse_alternatives(const std::string& rule_name, bool nested) {
    std::vector<Sequence> alts;
    alts.push_back(parse_sequence(rule_name, nested));
    while (peek() == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(rule_name, nested));
    }
    return alts;
  }

  uint32_t hex_value(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char c = peek();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) fail("expected " + std::to_string(digits) + " hexadecimal digits in the escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++pos_;
    }
    return v;
  }

  // One character of a literal or class (an escape, or one UTF-8 character), as a code point.
  uint32_t parse_char() {
    if (at_end()) fail("unexpected end of the grammar inside a literal or class");
    const unsigned char c = static_cast<unsigned char>(peek());
    if (c == '\\') {
      ++pos_;
      const char e = peek();
      ++pos_;
      switch (e) {
        case 'x': return hex_value(2);
        case 'u': return hex_value(4);
        case 'U': {
          const uint32_t v = hex_value(8);
          if (v > kMaxCodePoint) fail("the escape names a code point past U+10FFFF");
          return v;
        }
        case 't': return '\t';
        case 'r': return '\r';
        case 'n': return '\n';
        case '\\': case '"': case '[': case ']': case '-': case '/': case '^': case '\'': case '.': case '|':
        case '(': case ')': case '*': case '+': case '?': case '{': case '}': case ' ':
          return static_cast<unsigned char>(e);
        default:
          pos_ -= 2;
          fail(std::string("unknown escape '\\") + (e ? std::string(1, e) : std::string()) + "'");
      }
    }
    // A UTF-8 character, read as one code point.
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + len > text_.size()) fail("the grammar is not valid UTF-8 here");
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < len; ++i) {
      const unsigned char k = static_cast<unsigned char>(text_[pos_ + i]);
      if ((k & 0xC0) != 0x80) fail("the grammar is not valid UTF-8 here");
      v = (v << 6) | (k & 0x3F);
    }
    pos_ += len;
    return v;
  }

  // The elements matching any code point of `ranges`: one byte set for ASCII alone, else a rule.
  Sequence class_elements(const CodePointRanges& ranges, const std::string& rule_name) {
    const std::vector<std::vector<ByteSet>> seqs = utf8_sequences(ranges);
    if (seqs.empty()) return {builder_.bytes(ByteSet{})};  // matches nothing
    if (seqs.size() == 1) {
      Sequence one;
      for (const ByteSet& s : seqs[0]) one.push_back(builder_.bytes(s));
      return one;
    }
    std::vector<Sequence> alts;
    for (const auto& seq : seqs) {
      Sequence alt;
      for (const ByteSet& s : seq) alt.push_back(builder_.bytes(s));
      alts.push_back(std::move(alt));
    }
    const uint32_t id = builder_.fresh(rule_name);
    builder_.define(id, std::move(alts));
    return {RulesBuilder::ref(id)};
  }

  int64_t parse_count() {
    const size_t start = pos_;
    int64_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (peek() - '0');
      if (v > kMaxRepeat) fail_at(start, "a repetition count above " + std::to_string(kMaxRepeat) + " is not supported");
      ++pos_;
    }
    if (pos_ == start) fail("expected a number in the repetition {m,n}");
    return v;
  }

  Sequence parse_sequence(const std::string& rule_name, bool nested) {
    Sequence out;
    size_t last_start = 0;
    bool have_last = false;
    while (!at_end()) {
      if (builder_.rule_count() > kMaxRules) fail("the grammar holds more than " + std::to_string(kMaxRules) + " rules");
      const char c = peek();
      const size_t start = out.size();
      if (c == '"') {
        ++pos_;
        while (peek() != '"') {
          if (at_end()) fail("unterminated literal: expected '\"'");
          for (const uint8_t b : utf8_bytes(parse_char())) {
            ByteSet s;
            s.set(b);
            out.push_back(builder_.bytes(s));
          }
        }
        ++pos_;
      } else if (c == '[') {
        const size_t open = pos_;
        ++pos_;
        const bool negated = peek() == '^';
        if (negated) ++pos_;
        CodePointRanges ranges;
        while (peek() != ']') {
          if (at_end()) fail_at(open, "unterminated character class: expected ']'");
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail("the range's end comes before its start");
          }
          ranges.emplace_back(lo, hi);
        }
        ++pos_;
        const Sequence cls = class_elements(negated ? complement(ranges) : ranges, rule_name);
        out.insert(out.end(), cls.begin(), cls.end());
      } else if (c == '.') {
        ++pos_;
        const Sequence any = class_elements({{0, kMaxCodePoint}}, rule_name);
        out.insert(out.end(), any.begin(), any.end());
      } else if (is_name_char(c)) {
        const size_t at = pos_;
        const std::string name = parse_name();
        // A name followed by ::= starts the next rule: this sequence ended at the line before.
        const size_t after = pos_;
        skip_space(false);
        if (text_.substr(pos_, 3) == "::=") fail_at(at, "expected the end of the line before the rule '" + name + "'");
        pos_ = after;
        out.push_back(RulesBuilder::ref(builder_.rule(name)));
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        std::vector<Sequence> alts = parse_alternatives(rule_name, true);
        if (peek() != ')') fail("expected ')' to close the group");
        ++pos_;
        const uint32_t id = builder_.fresh(rule_name);
        builder_.define(id, std::move(alts));
        out.push_back(RulesBuilder::ref(id));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) fail(std::string("'") + c + "' must follow an item to repeat");
        int64_t min = 0, max = -1;
        ++pos_;
        if (c == '+') min = 1;
        if (c == '?') max = 1;
        if (c == '{') {
          skip_space(false);
          min = parse_count();
          skip_space(false);
          if (peek() == ',') {
            ++pos_;
            skip_space(false);
            if (peek() != '}') {
              max = parse_count();
              if (max < min) fail("the repetition's maximum is below its minimum");
            }
          } else {
            max = min;
          }
          skip_space(false);
          if (peek() != '}') fail("expected '}' to close the repetition");
          ++pos_;
        }
        const Sequence item(out.begin() + static_cast<std::ptrdiff_t>(last_start), out.end());
        out.resize(last_start);
        const Sequence rep = builder_.repeat(item, min, max, rule_name);
        out.insert(out.end(), rep.begin(), rep.end());
        skip_space(nested);
        have_last = false;  // x** is a mistake, as in llama.cpp's reader
        continue;
      } else {
        break;
      }
      last_start = start;
      have_last = true;
      skip_space(nested);
    }
    return out;
  }

  std::string_view text_;
  size_t pos_ = 0;
  RulesBuilder builder_;
};

}  // namespace

Rules parse_gbnf(std::string_view text, std::string_view root) { return Parser(text).parse(root); }

}  // namespace lockstep::grammar
