// The S-expression reader of run files.
#include "train/sexp.hpp"

#include "lockstep/error.hpp"

namespace lockstep::train {
namespace {

bool is_delimiter(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '(' || c == ')' || c == '"' || c == ';';
}

// [+-] (digits [. digits*] | . digits) [(e|E) [+-] digits]
bool is_number_syntax(std::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const size_t whole = digits();
  size_t fraction = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    fraction = digits();
  }
  if (whole == 0 && fraction == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

// A token that starts like a number is held to the number grammar: `1.2.3` is a mistake, not a
// symbol.
bool looks_numeric(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  if (i < s.size() && s[i] == '.') ++i;
  return i < s.size() && s[i] >= '0' && s[i] <= '9';
}

std::string byte_text(unsigned char c) {
  static const char* hex = "0123456789abcdef";
  return std::string("0x") + hex[c >> 4] + hex[c & 15];
}

class Reader {
 public:
  Reader(std::string_view text, const std::string& file) : text_(text), file_(file) {}

  std::vector<Sexp> read_all() {
    std::vector<Sexp> forms;
    for (;;) {
      skip_space();
      if (i_ >= text_.size()) return forms;
      forms.push_back(read(0));
    }
  }

 private:
  SourcePos here() const { return {line_, column_}; }

  void advance() {
    if (text_[i_] == '\n') {
      ++line_;
      column_ = 1;
    } else {
      ++column_;
    }
    ++i_;
  }

  void check_char(unsigned char c) const {
    if (c == 0 || (c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      fail(file_, here(), "unexpected control character " + byte_text(c));
  }

  void skip_space() {
    while (i_ < text_.size()) {
      const char c = text_[i_];
      if (c == ';') {
        while (i_ < text_.size() && text_[i_] != '\n') {
          check_char(static_cast<unsigned char>(text_[i_]));
          advance();
        }
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        advance();
      } else {
        return;
      }
    }
  }

  Sexp read(int depth) {
    Sexp out;
    out.pos = here();
    const char c = text_[i_];
    if (c == '(') {
      if (depth >= kMaxSexpDepth)
        fail(file_, out.pos, "lists nest more than " + std::to_string(kMaxSexpDepth) + " deep");
      out.kind = Sexp::Kind::list;
      advance();
      for (;;) {
        skip_space();
        if (i_ >= text_.size()) fail(file_, out.pos, "this '(' is never closed");
        if (text_[i_] == ')') {
          advance();
          return out;
        }
        out.items.push_back(read(depth + 1));
      }
    }
    if (c == ')') fail(file_, out.pos, "this ')' closes no list");
    if (c == '"') {
      out.kind = Sexp::Kind::string;
      advance();
      for (;;) {
        if (i_ >= text_.size()) fail(file_, out.pos, "this string is never closed");
        const char s = text_[i_];
        if (s == '"') {
          advance();
          return out;
        }
        if (s == '\\') {
          const SourcePos escape = here();
          advance();
          if (i_ >= text_.size()) fail(file_, out.pos, "this string is never closed");
          const char e = text_[i_];
          if (e == '"' || e == '\\') {
            out.text += e;
          } else if (e == 'n') {
            out.text += '\n';
          } else if (e == 't') {
            out.text += '\t';
          } else {
            fail(file_, escape,
                 std::string("unknown escape '\\") +
                     (e >= 0x20 && e < 0x7f ? std::string(1, e) : byte_text(static_cast<unsigned char>(e))) +
                     "' in a string (known: \\\" \\\\ \\n \\t)");
          }
          advance();
          continue;
        }
        check_char(static_cast<unsigned char>(s));
        out.text += s;
        advance();
      }
    }
    std::string token;
    while (i_ < text_.size() && !is_delimiter(text_[i_])) {
      const auto u = static_cast<unsigned char>(text_[i_]);
      check_char(u);
      if (u >= 0x80) fail(file_, here(), "unexpected byte " + byte_text(u) + " outside a string");
      token += text_[i_];
      advance();
    }
    if (token[0] == ':') {
      if (token.size() == 1) fail(file_, out.pos, "':' alone is not a keyword");
      out.kind = Sexp::Kind::keyword;
      out.text = token.substr(1);
    } else if (looks_numeric(token)) {
      if (!is_number_syntax(token)) fail(file_, out.pos, "malformed number '" + token + "'");
      out.kind = Sexp::Kind::number;
      out.text = token;
    } else {
      out.kind = Sexp::Kind::symbol;
      out.text = token;
    }
    return out;
  }

  std::string_view text_;
  const std::string& file_;
  size_t i_ = 0;
  int64_t line_ = 1, column_ = 1;
};

}  // namespace

std::string describe(const Sexp& v) {
  switch (v.kind) {
    case Sexp::Kind::list:
      return "a list";
    case Sexp::Kind::keyword:
      return "the keyword :" + v.text;
    case Sexp::Kind::string: {
      std::string s = v.text.size() > 40 ? v.text.substr(0, 40) + "..." : v.text;
      for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20) c = '?';
      return "the string \"" + s + "\"";
    }
    case Sexp::Kind::number:
      return v.text;
    case Sexp::Kind::symbol:
      return "the symbol " + v.text;
  }
  return "?";
}

void fail(const std::string& file, SourcePos at, const std::string& problem) {
  throw Error(ErrorKind::format,
              file + ":" + std::to_string(at.line) + ":" + std::to_string(at.column) + ": " + problem);
}

std::vector<Sexp> read_sexps(std::string_view text, const std::string& file) {
  return Reader(text, file).read_all();
}

}  // namespace lockstep::train
