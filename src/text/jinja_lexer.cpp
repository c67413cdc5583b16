// The template's source as segments (text/jinja.hpp), with Jinja2's whitespace control as
// transformers configures it:
//   `{%-`, `{{-`, `{#-` strip the whitespace before the tag, `-%}`, `-}}`, `-#}` the whitespace after;
//   trim_blocks: the newline right after `%}` or `#}` goes (not after `}}`; `+%}` keeps it);
//   lstrip_blocks: spaces and tabs between a line's start and `{%` or `{#` go (`{%+` keeps them);
//   keep_trailing_newline false: one newline ending the template goes.
// Line ends are made "\n" first, as Jinja2's newline_sequence does.
#include <cctype>

#include "lockstep/error.hpp"
#include "text/jinja.hpp"

namespace lockstep::text::jinja {
namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

[[noreturn]] void fail(const std::string& name, int line, const std::string& what) {
  throw Error(ErrorKind::format, name + " line " + std::to_string(line) + ": " + what);
}

class Lexer {
 public:
  Lexer(std::string source, const std::string& name) : src_(std::move(source)), name_(name) {}

  std::vector<Segment> run() {
    std::vector<Segment> out;
    std::string text;
    bool line_starting = true;  // the text begins a line (the template's start, or after "\n")
    int text_line = 1;
    while (pos_ < src_.size()) {
      const size_t open = find_open(pos_);
      text.append(src_, pos_, open - pos_);
      advance_to(open);
      if (open >= src_.size()) break;
      const char type = src_[open + 1];  // '{', '%' or '#'
      const char flag = open + 2 < src_.size() ? src_[open + 2] : '\0';
      const int tag_line = line_;
      if (flag == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      } else if (flag != '+' && type != '{') {
        // lstrip_blocks: the text's last line is whitespace alone, at a line's start.
        const size_t last_nl = text.rfind('\n');
        const size_t l_pos = last_nl == std::string::npos ? 0 : last_nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_ws(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      if (!text.empty()) out.push_back(Segment{Segment::Kind::text, std::move(text), {}, text_line});
      text.clear();
      advance_to(open + 2 + (flag == '-' || flag == '+' ? 1 : 0));
      bool strip_after = false, keep_newline = false;
      if (type == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) fail(name_, tag_line, "a comment {# is never closed");
        strip_after = close > pos_ && src_[close - 1] == '-';
        keep_newline = close > pos_ && src_[close - 1] == '+';
        advance_to(close + 2);
      } else {
        Segment seg{type == '{' ? Segment::Kind::expression : Segment::Kind::statement, {}, {}, tag_line};
        seg.tokens = tokens(type == '{' ? '}' : '%', strip_after, keep_newline, tag_line);
        out.push_back(std::move(seg));
      }
      if (strip_after) {
        while (pos_ < src_.size() && is_ws(src_[pos_])) advance_to(pos_ + 1);
      } else if (type != '{' && !keep_newline && pos_ < src_.size() && src_[pos_] == '\n') {
        advance_to(pos_ + 1);  // trim_blocks
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
      text_line = line_;
    }
    if (!text.empty()) out.push_back(Segment{Segment::Kind::text, std::move(text), {}, text_line});
    return out;
  }

 private:
  size_t find_open(size_t from) const {
    for (size_t k = from; k + 1 < src_.size(); ++k)
      if (src_[k] == '{' && (src_[k + 1] == '{' || src_[k + 1] == '%' || src_[k + 1] == '#')) return k;
    return src_.size();
  }

  void advance_to(size_t to) {
    for (; pos_ < to && pos_ < src_.size(); ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  // The tokens of a tag up to its closing `}}` or `%}` (`close` is its first character), outside
  // any bracket; the closing is consumed.
  std::vector<Token> tokens(char close, bool& strip_after, bool& keep_newline, int tag_line) {
    std::vector<Token> out;
    int depth = 0;
    for (;;) {
      while (pos_ < src_.size() && is_ws(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        fail(name_, tag_line, std::string("a tag opened here is never closed (no ") + close + "})");
      const char c = src_[pos_];
      auto at = [&](size_t k) { return pos_ + k < src_.size() ? src_[pos_ + k] : '\0'; };
      if (depth == 0) {
        if (c == close && at(1) == '}') {
          advance_to(pos_ + 2);
          break;
        }
        if ((c == '-' || c == '+') && at(1) == close && at(2) == '}') {
          strip_after = c == '-';
          keep_newline = c == '+';
          advance_to(pos_ + 3);
          break;
        }
      }
      Token t{Token::Kind::op, {}, 0, 0.0, line_};
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        t.kind = Token::Kind::name;
        t.text = src_.substr(pos_, e - pos_);
        advance_to(e);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number(t);
      } else if (c == '\'' || c == '"') {
        string(t, c);
      } else {
        static const char* const two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op(1, c);
        for (const char* o : two)
          if (c == o[0] && at(1) == o[1]) op = o;
        if (op.size() == 1 && std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos)
          fail(name_, line_, std::string("unexpected character '") + c + "' in a tag");
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
        t.text = op;
        advance_to(pos_ + op.size());
      }
      out.push_back(std::move(t));
    }
    out.push_back(Token{Token::Kind::end, {}, 0, 0.0, line_});
    return out;
  }

  void number(Token& t) {
    size_t e = pos_;
    std::string digits;
    auto run = [&] {
      while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
        if (src_[e] != '_') digits += src_[e];
        ++e;
      }
    };
    run();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      digits += src_[e++];
      run();
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        digits.append(src_, e, k - e);
        e = k;
        run();
      }
    }
    try {
      if (is_float) {
        t.kind = Token::Kind::floating;
        t.f = std::stod(digits);
      } else {
        t.kind = Token::Kind::integer;
        t.i = std::stoll(digits);
      }
    } catch (const std::exception&) {
      fail(name_, line_, "the number " + digits + " is out of range");
    }
    advance_to(e);
  }

  // A quoted string with Python's escapes (\n \t \r \\ \' \" \uXXXX ...).
  void string(Token& t, char quote) {
    const int start_line = line_;
    size_t k = pos_ + 1;
    std::string out;
    for (;;) {
      if (k >= src_.size()) fail(name_, start_line, "a string is never closed");
      const char c = src_[k];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++k;
        continue;
      }
      if (k + 1 >= src_.size()) fail(name_, start_line, "a string is never closed");
      const char e = src_[k + 1];
      k += 2;
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;
        case 'u':
        case 'x': {
          const size_t n = e == 'u' ? 4 : 2;
          if (k + n > src_.size()) fail(name_, start_line, "a \\" + std::string(1, e) + " escape is cut short");
          uint32_t cp = 0;
          for (size_t d = 0; d < n; ++d) {
            const char h = src_[k + d];
            if (!std::isxdigit(static_cast<unsigned char>(h))) fail(name_, start_line, "a bad \\" + std::string(1, e) + " escape");
            cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
          }
          k += n;
          out += utf8({cp}, 0, 1);
          break;
        }
        default:  // Python keeps an unknown escape as written
          out += '\\';
          out += e;
      }
    }
    t.kind = Token::Kind::string;
    t.text = std::move(out);
    advance_to(k + 1);
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

std::vector<Segment> lex(std::string_view source, const std::string& name) {
  std::string src;
  src.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      src += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      src += source[k];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();  // keep_trailing_newline = False
  return Lexer(std::move(src), name).run();
}

}  // namespace lockstep::text::jinja
