// JSON from outside (a file someone wrote, a request body): the one place that parses it, and a
// bound on its nesting, checked before nlohmann parses it. nlohmann's parser is iterative, but
// copying, comparing and dump() recurse once per level, so 100,000 nested brackets (200 KB)
// overflow the stack; no document lockstep reads nests past a handful of levels.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lockstep::format {

inline constexpr int kMaxJsonDepth = 64;

// The offset of the first '[' or '{' that opens level max_depth + 1 of `text` (brackets inside
// strings skipped), or npos. Exact for valid JSON; for anything else it may be wrong in either
// direction, and the parser refuses that text anyway.
size_t json_too_deep_at(std::string_view text, int max_depth = kMaxJsonDepth);

// Refuses (Error kind format, "<what>: ...") text that nests past kMaxJsonDepth, at its offset.
void check_json_depth(std::string_view text, const std::string& what);

// nlohmann::json::parse(text) and nlohmann::ordered_json::parse(text), instantiated once, in
// json_text.cpp: a file that calls parse() itself compiles its own copy of nlohmann's lexer and
// parser (about 2.5 s of compile time a file at -O3, 7 s under the sanitizers' -O1, in 25 files).
// Same results, and the same nlohmann::json::parse_error on text that is not JSON.
nlohmann::json parse_json(std::string_view text);
nlohmann::ordered_json parse_ordered_json(std::string_view text);

}  // namespace lockstep::format
