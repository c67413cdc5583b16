// Model directories and checkpoint locations: the public functions of lockstep/format.hpp.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/os_error.hpp"

namespace lockstep {
namespace {

// The step of a name step_directory_name() writes, or -1: "step-" then the step zero-padded to
// eight digits, or more digits without a leading zero once the step needs them.
int64_t parse_step_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step-";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  const std::string_view digits = name.substr(kPrefix.size());
  if (digits.size() < 8 || digits.size() > 18) return -1;  // 18 digits stay inside int64
  if (digits.size() > 8 && digits[0] == '0') return -1;
  int64_t step = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    step = step * 10 + (c - '0');
  }
  return step;
}

bool is_regular_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

std::vector<TensorSpec> model_inputs(const ModelConfig& c) {
  return {{"inputs", {1, c.length}, "i32"}};
}

std::vector<TensorSpec> model_outputs(const ModelConfig& c) {
  return {{"logits", {1, c.length, c.vocab_size}, "f32"}, {"hidden", {1, c.length, c.d_model}, "f32"}};
}

std::string step_directory_name(int64_t step) {
  if (step < 0)
    throw Error(ErrorKind::invalid_argument, "checkpoint step " + std::to_string(step) + " is negative");
  std::string digits = std::to_string(step);
  if (digits.size() < 8) digits.insert(0, 8 - digits.size(), '0');
  return "step-" + digits;
}

std::vector<int64_t> list_checkpoint_steps(const std::string& location) {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(location.c_str());
  if (!d) return steps;
  while (dirent* e = ::readdir(d)) {
    const int64_t step = parse_step_name(e->d_name);
    if (step >= 0 && is_regular_file(location + "/" + e->d_name + "/model.json")) steps.push_back(step);
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

ResolvedPath resolve_model_path(std::string_view path_view) {
  std::string path(path_view);
  if (path.empty()) throw Error(ErrorKind::invalid_argument, "model path is empty");
  if (const size_t scheme = path.find("://"); scheme != std::string::npos)
    throw Error(ErrorKind::unsupported,
                "'" + path + "': remote checkpoint locations are not supported; lockstep reads "
                "local directories");
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (struct stat st; ::lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) throw OsError(ENOENT, "'" + path + "': no such file or directory");
    throw OsError(err, "'" + path + "': cannot inspect it: " + std::strerror(err));
  }
  ResolvedPath out;
  if (is_regular_file(path)) {
    if (format::base_name(path) != "model.json")
      throw Error(ErrorKind::invalid_argument,
                  "'" + path + "' is a file but not a model.json; give a model directory, a "
                  "checkpoint step directory or a checkpoint location");
    path = format::parent_directory(path);
  }
  if (is_regular_file(path + "/model.json")) {
    out.model_dir = path;
    const int64_t step = parse_step_name(format::base_name(path));
    if (step >= 0) {
      out.checkpoint_step = true;
      out.step = step;
    }
    return out;
  }
  if (!format::is_directory(path))
    throw Error(ErrorKind::invalid_argument, "'" + path + "' is not a directory");
  const std::vector<int64_t> steps = list_checkpoint_steps(path);
  if (steps.empty())
    throw Error(ErrorKind::invalid_argument,
                "'" + path + "' is not a model directory, a checkpoint step or a checkpoint "
                "location: it holds no model.json and no complete step-NNNNNNNN directory");
  out.model_dir = path + "/" + step_directory_name(steps.back());
  out.checkpoint_step = true;
  out.step = steps.back();
  return out;
}

void write_model_directory(const std::string& dir, const ModelConfig& config,
                           std::span<const float> parameters, const ModelMetadata& metadata) {
  config.validate();
  if (format::path_exists(dir))
    throw Error(ErrorKind::invalid_argument, "'" + dir + "' already exists; lockstep will not overwrite it");
  format::AtomicDirectory out(dir);
  format::write_weights(out.file(format::kWeightsFile), config, parameters);
  format::ModelDescription d;
  d.config = config;
  d.profile = profile_name();
  d.precision = metadata.precision;
  d.source = metadata.source;
  d.source.directory.clear();
  d.weights = {format::kWeightsFile, "float32", sha256_f32_le(parameters)};
  d.eos_token_ids = metadata.eos_token_ids;
  format::write_file_synced(out.file("model.json"), format::render_model_json(d));
  out.commit();
}

}  // namespace lockstep
