// The `tokenizer` entry of a model's model.json, read the same way by the SentencePiece build
// (text/tokenizer.cpp) and the build without it (text/no_tokenizer/tokenizer.cpp).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace lockstep::text {

struct TokenizerEntry {
  std::string model_dir;  // the model directory `model_path` resolves to
  std::string json_path;  // its model.json
  nlohmann::json model_json;  // the whole of it
  nlohmann::json entry;       // its `tokenizer`; null when it names none
};

// Throws Error naming model.json when it is not valid JSON.
TokenizerEntry read_tokenizer_entry(std::string_view model_path);

}  // namespace lockstep::text
