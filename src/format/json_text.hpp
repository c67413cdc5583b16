// JSON from outside (a file someone wrote, a request body): a bound on its nesting, checked
// before nlohmann parses it. nlohmann's parser is iterative, but copying, comparing and dump()
// recurse once per level, so 100,000 nested brackets (200 KB) overflow the stack; no document
// lockstep reads nests past a handful of levels.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lockstep::format {

inline constexpr int kMaxJsonDepth = 64;

// The offset of the first '[' or '{' that opens level max_depth + 1 of `text` (brackets inside
// strings skipped), or npos. Exact for valid JSON; for anything else it may be wrong in either
// direction, and the parser refuses that text anyway.
size_t json_too_deep_at(std::string_view text, int max_depth = kMaxJsonDepth);

// Refuses (Error kind format, "<what>: ...") text that nests past kMaxJsonDepth, at its offset.
void check_json_depth(std::string_view text, const std::string& what);

}  // namespace lockstep::format
