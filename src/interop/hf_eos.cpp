#include "interop/hf_eos.hpp"

#include <algorithm>
#include <sys/stat.h>

#include "interop/json_file.hpp"
#include "lockstep/error.hpp"

namespace lockstep::interop {
namespace {

using nlohmann::json;

// `value` (one id or a list of ids) as ids, checked against the vocabulary.
std::vector<int32_t> ids_of(const json& value, const std::string& where, int32_t vocab) {
  const json list = value.is_array() ? value : json::array({value});
  std::vector<int32_t> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = value.is_array() ? "'eos_token_id'[" + std::to_string(i) + "]" : "'eos_token_id'";
    const json& v = list[i];
    if (!v.is_number_integer())
      throw Error(ErrorKind::format, where + ": " + field + " is " + v.dump() + ", not a token id");
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                 : v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab;
    if (!in_range)
      throw Error(ErrorKind::format, where + ": " + field + " is " + v.dump() +
                                         ", outside the vocabulary (vocab_size " + std::to_string(vocab) + ")");
    const int32_t id = static_cast<int32_t>(v.get<int64_t>());
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

}  // namespace

std::vector<int32_t> hf_eos_token_ids(const std::string& dir, const json& config, const std::string& config_path,
                                      int32_t vocab_size) {
  const std::string generation = dir + "/generation_config.json";
  struct stat st{};
  if (::stat(generation.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
    const json g = read_json_file(generation, size_t{16} << 20);
    if (!g.is_object()) throw Error(ErrorKind::format, generation + ": is not a JSON object");
    if (const auto it = g.find("eos_token_id"); it != g.end() && !it->is_null()) return ids_of(*it, generation, vocab_size);
  }
  if (const auto it = config.find("eos_token_id"); it != config.end() && !it->is_null())
    return ids_of(*it, config_path, vocab_size);
  return {};
}

}  // namespace lockstep::interop
