#include "format/format_fixtures.hpp"

#include <dirent.h>

#include <algorithm>
#include <stdexcept>

#include "format/json_text.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep::test {

std::vector<float> write_init_model(const std::string& dir, const ModelConfig& config, uint64_t seed) {
  std::vector<float> params = init_parameters(config, seed);
  write_model_directory(dir, config, params, {});
  return params;
}

nlohmann::ordered_json SafetensorsFile::header() const { return lockstep::format::parse_ordered_json(header_text); }

SafetensorsFile split_safetensors(const std::string& bytes) {
  if (bytes.size() < 8) throw std::runtime_error("split_safetensors: shorter than 8 bytes");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[static_cast<size_t>(i)]);
  if (n > bytes.size() - 8) throw std::runtime_error("split_safetensors: header past the end");
  return {bytes.substr(8, n), bytes.substr(8 + n)};
}

std::string join_safetensors(const std::string& header_text, const std::string& data) {
  std::string text = header_text;
  while ((8 + text.size()) % 64 != 0) text.push_back(' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>(static_cast<uint64_t>(text.size()) >> (8 * i));
  return out + text + data;
}

std::string join_safetensors_json(const nlohmann::ordered_json& header, const std::string& data) {
  return join_safetensors(header.dump(), data);
}

void edit_safetensors(const std::string& dir,
                      const std::function<void(nlohmann::ordered_json&, std::string&)>& edit) {
  const std::string path = dir + "/params.safetensors";
  SafetensorsFile file = split_safetensors(read_file(path));
  nlohmann::ordered_json header = file.header();
  edit(header, file.data);
  write_file(path, join_safetensors_json(header, file.data));
}

void edit_model_json(const std::string& dir, const std::function<void(nlohmann::ordered_json&)>& edit) {
  const std::string path = dir + "/model.json";
  nlohmann::ordered_json j = lockstep::format::parse_ordered_json(read_file(path));
  edit(j);
  write_file(path, j.dump(2));
}

Refusal load_refusal(const std::string& path, bool trained) {
  Refusal r;
  try {
    LoadOptions options;
    options.trained = trained;
    options.threads = 1;
    Model::load(path, options);
  } catch (const Error& e) {
    r.thrown = true;
    r.kind = e.kind();
    r.message = e.what();
  }
  return r;
}

::testing::AssertionResult HasAll(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    if (text.find(p) == std::string::npos)
      return ::testing::AssertionFailure() << "'" << p << "' is not in: " << text;
  return ::testing::AssertionSuccess();
}

std::vector<std::string> list_directory(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) throw std::runtime_error("cannot list " + dir);
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace lockstep::test
