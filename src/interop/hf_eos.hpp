// The end-of-sequence ids of a Hugging Face checkpoint (import_hf): generation_config.json's
// eos_token_id over config.json's, one id or a list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::interop {

// `dir`'s generation_config.json's `eos_token_id` when it has one, else `config`'s (config.json,
// read from `config_path`); none (null or absent): empty. Duplicates are dropped, the order kept.
// Throws Error(format) naming the file and the field for what is not an id or a list of ids, or an
// id outside [0, vocab_size).
std::vector<int32_t> hf_eos_token_ids(const std::string& dir, const nlohmann::json& config,
                                      const std::string& config_path, int32_t vocab_size);

}  // namespace lockstep::interop
