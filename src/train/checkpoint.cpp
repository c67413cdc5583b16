#include "format/format_error.hpp"
#include "train/checkpoint.hpp"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "format/safetensors.hpp"
#include "format/weights.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"

namespace lockstep::train {
namespace {

using format::refuse;
using format::shortest_decimal;

using nlohmann::json;
using ordered = nlohmann::ordered_json;



// optimizer.safetensors: "m.<parameter>" then "v.<parameter>" for every registry parameter, F32,
// in registry order.
void write_optimizer(const std::string& path, const ModelConfig& config, std::span<const float> m,
                     std::span<const float> v, int64_t step) {
  const ParameterRegistry registry(config);
  std::vector<format::TensorData> tensors;
  for (const char* prefix : {"m.", "v."}) {
    const float* base = prefix[0] == 'm' ? m.data() : v.data();
    for (const auto& e : registry.entries())
      tensors.push_back({prefix + e.name, format::DType::f32, e.shape, base + e.offset});
  }
  format::write_safetensors(path, tensors,
                            {{"format", "lockstep-optimizer"}, {"completed_steps", std::to_string(step)}});
}

void read_optimizer(const std::string& path, const ModelConfig& config, std::vector<float>& m,
                    std::vector<float>& v) {
  const format::MappedFile file(path);
  const format::SafetensorsHeader header = format::parse_safetensors(file.bytes(), path);
  const ParameterRegistry registry(config);
  std::map<std::string, const format::TensorEntry*> by_name;
  for (const auto& t : header.tensors) by_name[t.name] = &t;
  if (by_name.size() != 2 * registry.entries().size())
    refuse(path, "holds " + std::to_string(by_name.size()) + " tensors, expected m. and v. of each of the " +
                     std::to_string(registry.entries().size()) + " parameters");
  m.assign(static_cast<size_t>(registry.total()), 0.0f);
  v.assign(static_cast<size_t>(registry.total()), 0.0f);
  for (const char* prefix : {"m.", "v."}) {
    std::vector<float>& out = prefix[0] == 'm' ? m : v;
    for (const auto& e : registry.entries()) {
      const std::string name = prefix + e.name;
      const auto it = by_name.find(name);
      if (it == by_name.end()) refuse(path, "tensor '" + name + "' is missing");
      const format::TensorEntry& t = *it->second;
      if (t.dtype != format::DType::f32 || t.shape != e.shape)
        refuse(path, "tensor '" + name + "' is not F32 of the parameter's shape");
      std::memcpy(out.data() + e.offset, file.bytes().data() + header.data_offset + t.begin,
                  static_cast<size_t>(e.count) * sizeof(float));
    }
  }
}

std::string render_training(const CheckpointInput& in, const std::string& m_sha, const std::string& v_sha) {
  ordered j;
  j["format"] = kTrainingFormat;
  j["format_version"] = kTrainingFormatVersion;
  j["slug"] = in.run.slug;
  j["step"] = in.trainer.completed_steps();
  j["run_file"] = {{"file", kRunFileCopy}, {"sha256", sha256_hex(in.run.text.data(), in.run.text.size())}};
  j["optimizer"] = {{"file", kOptimizerFile}, {"m_sha256", m_sha}, {"v_sha256", v_sha}};
  j["ema_decay"] = in.run.ema > 0.0f ? ordered(shortest_decimal(in.run.ema)) : ordered(nullptr);
  ordered data = ordered::array();
  for (const DataFileInfo& f : in.data)
    data.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", f.sha256}});
  j["data"] = data;
  return j.dump(2) + "\n";
}

const json& field(const json& j, const char* key, const std::string& what) {
  const auto it = j.find(key);
  if (it == j.end()) refuse(what, std::string("has no field '") + key + "'");
  return *it;
}

std::string string_of(const json& j, const char* key, const std::string& what) {
  const json& v = field(j, key, what);
  if (!v.is_string()) refuse(what, std::string("field '") + key + "' is not a string");
  return v.get<std::string>();
}

int64_t integer_of(const json& j, const char* key, const std::string& what) {
  const json& v = field(j, key, what);
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    refuse(what, std::string("field '") + key + "' is not a non-negative integer");
  return v.get<int64_t>();
}

}  // namespace

std::string write_checkpoint(const std::string& location, const CheckpointInput& in) {
  const Trainer& t = in.trainer;
  const ModelConfig& config = t.config();
  const std::string path = location + "/" + step_directory_name(t.completed_steps());
  std::vector<std::string> omit;
  for (const auto& l : in.loaded) omit.push_back(l.name);
  const bool averaged = !t.ema().empty();

  format::AtomicDirectory out(path);
  format::ModelDescription d;
  d.config = config;
  d.profile = profile_name();
  d.precision = in.run.precision;
  d.source.step = t.completed_steps();
  d.source.slug = in.run.slug;
  d.loaded = in.loaded;
  const std::span<const float> served = averaged ? t.ema() : t.parameters();
  format::write_weights(out.file(format::kWeightsFile), config, served, omit);
  d.weights = {format::kWeightsFile, "float32", sha256_f32_le(served)};
  d.weights_averaged = averaged;
  if (averaged) {
    format::write_weights(out.file(format::kTrainedWeightsFile), config, t.parameters(), omit);
    d.trained = format::WeightsFile{format::kTrainedWeightsFile, "float32", sha256_f32_le(t.parameters())};
  }
  write_optimizer(out.file(kOptimizerFile), config, t.m(), t.v(), t.completed_steps());
  format::write_file_synced(out.file(kRunFileCopy), in.run.text);
  format::write_file_synced(out.file(kTrainingFile),
                            render_training(in, sha256_f32_le(t.m()), sha256_f32_le(t.v())));
  // model.json last: a step directory is complete when it holds one (docs/FORMAT.md).
  format::write_file_synced(out.file("model.json"), format::render_model_json(d));
  out.commit();
  return path;
}

Checkpoint read_checkpoint(const std::string& step_dir) {
  Checkpoint c;
  c.dir = step_dir;
  const std::string json_path = step_dir + "/model.json";
  c.model =
      format::parse_model_json(format::read_text_file(json_path, format::kMaxModelJsonBytes), json_path);
  const std::string training_path = step_dir + "/" + kTrainingFile;
  json j;
  try {
    const std::string text = format::read_text_file(training_path, format::kMaxModelJsonBytes);
    format::check_json_depth(text, training_path);
    j = format::parse_json(text);
  } catch (const json::exception& e) {
    refuse(training_path, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) refuse(training_path, "not a JSON object");
  if (string_of(j, "format", training_path) != kTrainingFormat)
    refuse(training_path, std::string("format is not '") + kTrainingFormat + "'");
  if (integer_of(j, "format_version", training_path) != kTrainingFormatVersion)
    refuse(training_path, "format_version is not " + std::to_string(kTrainingFormatVersion));
  c.step = integer_of(j, "step", training_path);
  if (c.model.source.step != c.step)
    refuse(training_path, "step " + std::to_string(c.step) + " is not model.json's checkpoint step");

  // Every field resume relies on is required and checked (FORMAT.md lets readers ignore fields
  // they do not know, so a misspelled one must fail here, as missing, not pass unread).
  const std::string slug = string_of(j, "slug", training_path);
  if (c.model.source.slug != slug)
    refuse(training_path, "slug '" + slug + "' is not model.json's checkpoint slug");
  const json& ema = field(j, "ema_decay", training_path);
  if (!ema.is_null()) {
    if (!ema.is_number() || !(ema.get<double>() > 0.0 && ema.get<double>() < 1.0))
      refuse(training_path, "field 'ema_decay' is neither null nor a number in (0, 1)");
    c.ema_decay = ema.get<double>();
  }
  if (c.model.weights_averaged != (c.ema_decay > 0.0))
    refuse(training_path, c.model.weights_averaged
                              ? "ema_decay is null but model.json's weights are averaged"
                              : "ema_decay is " + ema.dump() + " but model.json's weights are not averaged");

  const json& run_file = field(j, "run_file", training_path);
  if (!run_file.is_object()) refuse(training_path, "run_file is not an object");
  if (string_of(run_file, "file", training_path) != kRunFileCopy)
    refuse(training_path, std::string("run_file.file is not '") + kRunFileCopy + "'");
  c.run_text = format::read_text_file(step_dir + "/" + kRunFileCopy, size_t{1} << 20);
  if (sha256_hex(c.run_text.data(), c.run_text.size()) != string_of(run_file, "sha256", training_path))
    refuse(step_dir + "/" + kRunFileCopy, "its SHA-256 is not the one training.json records");

  const json& data = field(j, "data", training_path);
  if (!data.is_array()) refuse(training_path, "data is not an array");
  for (const json& f : data) {
    if (!f.is_object()) refuse(training_path, "a data entry is not an object");
    c.data.push_back({string_of(f, "path", training_path), integer_of(f, "bytes", training_path),
                      string_of(f, "sha256", training_path)});
  }

  const ModelConfig& config = c.model.config;
  const std::string weights = step_dir + "/" + c.model.weights.file;
  if (c.model.weights_averaged) {
    if (!c.model.trained) refuse(json_path, "the weights are averaged but no trained_weights are named");
    c.state.ema = format::read_weights(weights, config, c.model.weights.sha256, c.model.loaded);
    c.state.parameters = format::read_weights(step_dir + "/" + c.model.trained->file, config,
                                              c.model.trained->sha256, c.model.loaded);
  } else {
    c.state.parameters = format::read_weights(weights, config, c.model.weights.sha256, c.model.loaded);
  }
  const json& optimizer = field(j, "optimizer", training_path);
  if (!optimizer.is_object()) refuse(training_path, "optimizer is not an object");
  if (string_of(optimizer, "file", training_path) != kOptimizerFile)
    refuse(training_path, std::string("optimizer.file is not '") + kOptimizerFile + "'");
  const std::string optimizer_path = step_dir + "/" + kOptimizerFile;
  read_optimizer(optimizer_path, config, c.state.m, c.state.v);
  if (sha256_f32_le(c.state.m) != string_of(optimizer, "m_sha256", training_path) ||
      sha256_f32_le(c.state.v) != string_of(optimizer, "v_sha256", training_path))
    refuse(optimizer_path, "the moments' SHA-256 is not the one training.json records");
  c.state.completed_steps = c.step;
  return c;
}

std::vector<int64_t> remove_old_checkpoints(const std::string& location, int64_t keep) {
  std::vector<int64_t> removed;
  if (keep <= 0) return removed;
  const std::vector<int64_t> steps = list_checkpoint_steps(location);
  for (size_t i = 0; i + static_cast<size_t>(keep) < steps.size(); ++i) {
    const std::string name = step_directory_name(steps[i]);
    const std::string doomed = location + "/." + name + ".tmp-removing";
    format::remove_tree(doomed);
    if (::rename((location + "/" + name).c_str(), doomed.c_str()) != 0)
      throw Error(ErrorKind::io,
                  location + "/" + name + ": cannot remove an old checkpoint: " + std::strerror(errno));
    format::remove_tree(doomed);
    removed.push_back(steps[i]);
  }
  if (!removed.empty()) format::sync_directory(location);
  return removed;
}

void remove_stale_temporaries(const std::string& location) {
  DIR* d = ::opendir(location.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (format::is_temporary_name(name) &&
        (name.rfind(".step-", 0) == 0 || name.rfind(".metrics.jsonl.", 0) == 0))
      stale.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : stale) format::remove_tree(location + "/" + name);
}

}  // namespace lockstep::train
