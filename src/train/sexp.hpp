// The S-expression reader of run files: every token keeps its line and column so that each
// refusal can name where it is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lockstep::train {

struct SourcePos {
  int64_t line = 1;
  int64_t column = 1;  // in bytes, from 1
};

struct Sexp {
  enum class Kind { list, symbol, keyword, string, number };
  Kind kind = Kind::symbol;
  SourcePos pos;
  // symbol: its name; keyword: its name without ':'; string: the decoded contents; number: the
  // token as written (checked against the number grammar, converted by whoever reads it).
  std::string text;
  std::vector<Sexp> items;  // a list's elements
};

inline constexpr int kMaxSexpDepth = 32;

// Every top-level form of `text`: lists in parentheses (nested at most kMaxSexpDepth deep),
// "strings" (escapes \" \\ \n \t), :keywords, numbers ([+-] digits [. digits] [e [+-] digits];
// a token that starts like a number must be one) and symbols (printable ASCII); `;` starts a
// comment to the end of the line. Control characters other than tab, newline and carriage
// return are refused everywhere. Refusals: Error(format) "FILE:LINE:COLUMN: problem".
std::vector<Sexp> read_sexps(std::string_view text, const std::string& file);

// "a list", "the keyword :x", "the string \"...\"", "12", "the symbol x": for messages.
std::string describe(const Sexp& value);

// Throws Error(format) "FILE:LINE:COLUMN: problem".
[[noreturn]] void fail(const std::string& file, SourcePos at, const std::string& problem);

}  // namespace lockstep::train
