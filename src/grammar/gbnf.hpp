// GBNF, the grammar notation of llama.cpp (its grammars/README.md), read into rules:
//
//   root   ::= item ("," ws item)*     # a rule: a name, ::=, alternatives separated by |
//   item   ::= [a-z]+ | "\"" [^"\\]* "\"" | "x"{2,4} | ( "y" | "z" )? .
//
// Names are letters, digits and '-' (and '_'); a rule ends at a newline outside parentheses;
// literals "..." and classes [...] take the escapes \n \r \t \\ \" \[ \] \- \/ \xHH \uHHHH
// \UHHHHHHHH; [^...] negates a class; . is any character; ? * + and {m}, {m,}, {m,n} repeat the
// item before them; # starts a comment to the end of the line.
#pragma once

#include <string_view>

#include "grammar/rules.hpp"

namespace lockstep::grammar {

// Most times an item may be repeated by {m,n}, and the most rules a grammar may hold: a request
// cannot ask for a grammar that takes the server's memory.
inline constexpr int64_t kMaxRepeat = 1000;
inline constexpr size_t kMaxRules = 100000;

// Throws Error naming the line and column ("line 3, column 7: ...") of what cannot be read, or
// the rule that makes the grammar unusable (rules.hpp, check_rules).
Rules parse_gbnf(std::string_view text, std::string_view root = "root");

}  // namespace lockstep::grammar
