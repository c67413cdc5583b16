// JSON Schema's `pattern` for the regex subset lockstep supports, as GBNF for a JSON string's
// contents (between its quotes): literals, `.`, classes `[...]` and `[^...]` with ranges, the
// escapes \d \D \w \W \s \S \t \n \r \f \v \uHHHH and escaped punctuation, groups `(...)` and
// `(?:...)`, `|`, and the quantifiers ? * + {m} {m,} {m,n}; `^` and `$` only at the ends (a
// pattern not anchored there may have any characters before or after, as JSON Schema's search
// semantics say). A character the JSON text must escape (", \, controls) is written as its
// escape. Anything else (backreferences, lookaround, \b, lazy quantifiers, ...) is refused.
// Classes are those ECMAScript (the schema's dialect) and Python's re (a common validator's)
// agree on: see escape() in json_pattern.cpp.
#pragma once

#include <string>

namespace lockstep::grammar {

// Throws Error ("schema: WHERE: 'pattern' ... at character N") for what it does not support.
std::string pattern_to_gbnf(const std::string& pattern, const std::string& where);

}  // namespace lockstep::grammar
