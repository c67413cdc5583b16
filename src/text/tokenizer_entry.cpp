#include "text/tokenizer_entry.hpp"

#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"

namespace lockstep::text {

TokenizerEntry read_tokenizer_entry(std::string_view model_path) {
  TokenizerEntry t;
  t.model_dir = resolve_model_path(model_path).model_dir;
  t.json_path = t.model_dir + "/model.json";
  nlohmann::json& j = t.model_json;
  try {
    const std::string text = format::read_text_file(t.json_path, size_t{16} << 20);
    format::check_json_depth(text, t.json_path);
    j = format::parse_json(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::format, t.json_path + ": not valid JSON: " + e.what());
  }
  if (j.is_object() && j.contains("tokenizer")) t.entry = j["tokenizer"];
  return t;
}

}  // namespace lockstep::text
