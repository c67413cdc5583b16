// A JSON file another tool wrote (a Hugging Face config.json, a safetensors index,
// generation_config.json): read whole up to `max_bytes`, refused past 64 levels of nesting before
// it is parsed (format/json_text.hpp), and refused naming the file when it does not parse.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"

namespace lockstep::interop {

inline nlohmann::json read_json_file(const std::string& path, size_t max_bytes) {
  const std::string text = format::read_text_file(path, max_bytes);
  format::check_json_depth(text, path);
  try {
    return format::parse_json(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::format, path + ": not valid JSON: " + e.what());
  }
}

}  // namespace lockstep::interop
