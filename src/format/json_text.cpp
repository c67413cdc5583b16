#include "format/json_text.hpp"

#include "format/format_error.hpp"

namespace lockstep::format {

size_t json_too_deep_at(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

void check_json_depth(std::string_view text, const std::string& what) {
  if (const size_t at = json_too_deep_at(text); at != std::string_view::npos)
    refuse(what, "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " arrays and objects (at byte " +
                     std::to_string(at) + ")");
}

nlohmann::json parse_json(std::string_view text) { return nlohmann::json::parse(text); }

nlohmann::ordered_json parse_ordered_json(std::string_view text) { return nlohmann::ordered_json::parse(text); }

}  // namespace lockstep::format
