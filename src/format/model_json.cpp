#include "format/format_error.hpp"
#include "format/model_json.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <initializer_list>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "format/json_text.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"

namespace lockstep::format {
namespace {

using nlohmann::json;
using ordered = nlohmann::ordered_json;



// The fields each object of model.json may hold (docs/FORMAT.md, "What the reader checks").
constexpr std::initializer_list<const char*> kTopFields = {
    "format", "format_version", "architecture", "profile", "precision", "matrix_layout", "config",
    "inputs", "outputs", "checkpoint", "weights", "weights_averaged", "trained_weights", "loaded",
    "parameter_count", "parameters", "eos_token_ids"};
constexpr std::initializer_list<const char*> kConfigFields = {
    "vocab_size", "length", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "norm_eps",
    "rope_theta", "batch", "qkv_bias", "o_bias", "rope_scaling"};
constexpr std::initializer_list<const char*> kRopeScalingFields = {
    "type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
constexpr std::initializer_list<const char*> kWeightsFields = {"file", "format", "parameters_sha256"};
constexpr std::initializer_list<const char*> kCheckpointFields = {"step", "slug", "path"};
constexpr std::initializer_list<const char*> kLoadedFields = {"name", "file", "tensor", "sha256"};

std::string list_text(std::initializer_list<const char*> names) {
  std::string s;
  for (const char* n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// The keys of `object` not in `known`, in the object's order.
std::vector<std::string> unknown_fields(const json& object, std::initializer_list<const char*> known) {
  std::vector<std::string> out;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (std::find_if(known.begin(), known.end(), [&](const char* k) { return key == k; }) == known.end())
      out.push_back(key);
  }
  return out;
}

// A key as read from the file: quoted, control characters replaced, long ones cut.
std::string quoted_key(const std::string& key) {
  std::string out = "'";
  for (char c : key) {
    if (out.size() > 64) return out + "...'";
    out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  }
  return out + "'";
}

// Objects whose every field lockstep defines: a field it does not know is a mistake (a
// misspelled key would otherwise read as a missing one, or be dropped), refused by name.
void refuse_unknown_fields(const json& object, std::initializer_list<const char*> known,
                           const std::string& what, const std::string& where) {
  const std::vector<std::string> extra = unknown_fields(object, known);
  if (!extra.empty())
    refuse(what, where + " has an unknown field " + quoted_key(extra[0]) + " (its fields are " +
                     list_text(known) + ")");
}

const json& field(const json& object, const char* key, const std::string& what,
                  const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end()) refuse(what, where + " has no field '" + key + "'");
  return *it;
}

int32_t int_field(const json& object, const char* key, const std::string& what) {
  const json& v = field(object, key, what, "config");
  if (!v.is_number_integer()) refuse(what, std::string("config.") + key + " is not an integer");
  // An unsigned value above INT64_MAX would wrap in get<int64_t>(): test it as unsigned.
  const bool in_range =
      v.is_number_unsigned()
          ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max())
          : v.get<int64_t>() >= std::numeric_limits<int32_t>::min() &&
                v.get<int64_t>() <= std::numeric_limits<int32_t>::max();
  if (!in_range) refuse(what, std::string("config.") + key + " = " + v.dump() + " is out of range");
  return static_cast<int32_t>(v.get<int64_t>());
}

float float_field(const json& object, const char* key, const std::string& what) {
  const json& v = field(object, key, what, "config");
  if (!v.is_number()) refuse(what, std::string("config.") + key + " is not a number");
  // A double that rounds past f32's largest finite value has no f32 value. 0x1.ffffffp127 is
  // FLT_MAX plus half its ulp: everything below it rounds to a finite f32.
  const double x = v.get<double>();
  if (!(std::fabs(x) < 0x1.ffffffp127))
    refuse(what, std::string("config.") + key + " = " + v.dump() + " is outside the range of f32");
  return static_cast<float>(x);
}

std::string string_field(const json& object, const char* key, const std::string& what,
                         const std::string& where) {
  const json& v = field(object, key, what, where);
  if (!v.is_string()) refuse(what, where + "." + key + " is not a string");
  return v.get<std::string>();
}

ordered render_config(const ModelConfig& c) {
  ordered j;
  j["vocab_size"] = c.vocab_size;
  j["length"] = c.length;
  j["d_model"] = c.d_model;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["n_kv_heads"] = c.n_kv_heads;
  j["d_ff"] = c.d_ff;
  j["norm_eps"] = shortest_decimal(c.norm_eps);
  j["rope_theta"] = shortest_decimal(c.rope_theta);
  j["batch"] = c.batch;
  // Written only when a model has them, so that every other model's model.json is as before.
  if (c.qkv_bias) j["qkv_bias"] = true;
  if (c.o_bias) j["o_bias"] = true;
  if (c.rope_scaling) {
    const RopeScaling& r = *c.rope_scaling;
    ordered s;
    s["type"] = "llama3";
    s["factor"] = shortest_decimal(r.factor);
    s["low_freq_factor"] = shortest_decimal(r.low_freq_factor);
    s["high_freq_factor"] = shortest_decimal(r.high_freq_factor);
    s["original_max_position_embeddings"] = r.original_max_position;
    j["rope_scaling"] = s;
  }
  return j;
}

ordered render_specs(const std::vector<TensorSpec>& specs) {
  ordered list = ordered::array();
  for (const auto& s : specs) list.push_back({{"name", s.name}, {"shape", s.shape}, {"dtype", s.dtype}});
  return list;
}

ordered render_weights(const WeightsFile& w) {
  return {{"file", w.file}, {"format", w.format}, {"parameters_sha256", w.sha256}};
}

WeightsFile parse_weights(const json& j, const std::string& what, const std::string& where) {
  if (!j.is_object()) refuse(what, where + " is not a JSON object");
  refuse_unknown_fields(j, kWeightsFields, what, where);
  WeightsFile w;
  w.file = string_field(j, "file", what, where);
  w.format = string_field(j, "format", what, where);
  w.sha256 = string_field(j, "parameters_sha256", what, where);
  if (w.file.empty() || w.file.find('/') != std::string::npos || w.file[0] == '.')
    refuse(what, where + ".file '" + w.file + "' must be a plain file name in the model directory");
  if (w.format != "float32" && w.format != "q8" && w.format != "q4" && w.format != kGgufFormat)
    refuse(what, where + ".format '" + w.format + "' is not one this lockstep reads (float32, q8, q4, gguf)");
  if (w.sha256.size() != 64 || w.sha256.find_first_not_of("0123456789abcdef") != std::string::npos)
    refuse(what, where + ".parameters_sha256 is not 64 lower-case hex digits");
  return w;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

// model.json's `loaded`: the frozen parameters the weights files leave out.
std::vector<LoadedTensor> parse_loaded(const json& j, const ParameterRegistry& registry,
                                       const std::string& what) {
  if (!j.is_array()) refuse(what, "loaded is not a JSON array");
  std::vector<LoadedTensor> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string where = "loaded[" + std::to_string(i) + "]";
    if (!j[i].is_object()) refuse(what, where + " is not a JSON object");
    refuse_unknown_fields(j[i], kLoadedFields, what, where);
    LoadedTensor l;
    l.name = string_field(j[i], "name", what, where);
    l.file = string_field(j[i], "file", what, where);
    l.tensor = string_field(j[i], "tensor", what, where);
    l.sha256 = string_field(j[i], "sha256", what, where);
    if (registry.find(l.name) < 0)
      refuse(what, where + ".name '" + l.name + "' is not a parameter of this model");
    for (const LoadedTensor& before : out)
      if (before.name == l.name) refuse(what, where + ".name '" + l.name + "' is listed twice");
    if (l.file.empty() || l.file.find('\0') != std::string::npos)
      refuse(what, where + ".file is not a file name");
    if (l.tensor.empty()) refuse(what, where + ".tensor is empty");
    if (!is_sha256_hex(l.sha256)) refuse(what, where + ".sha256 is not 64 lower-case hex digits");
    out.push_back(std::move(l));
  }
  return out;
}

// model.json's `eos_token_ids`: a list of distinct ids within the vocabulary.
std::vector<int32_t> parse_eos_token_ids(const json& j, int32_t vocab, const std::string& what) {
  if (!j.is_array()) refuse(what, "eos_token_ids is not a JSON array of token ids");
  std::vector<int32_t> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string where = "eos_token_ids[" + std::to_string(i) + "]";
    if (!j[i].is_number_integer()) refuse(what, where + " is not an integer");
    const bool in_range = j[i].is_number_unsigned() ? j[i].get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                    : j[i].get<int64_t>() >= 0 && j[i].get<int64_t>() < vocab;
    if (!in_range)
      refuse(what, where + " = " + j[i].dump() + " is outside the vocabulary (ids 0 to " + std::to_string(vocab - 1) +
                       ", config.vocab_size " + std::to_string(vocab) + ")");
    const int32_t id = static_cast<int32_t>(j[i].get<int64_t>());
    if (std::find(out.begin(), out.end(), id) != out.end()) refuse(what, where + " = " + j[i].dump() + " is listed twice");
    out.push_back(id);
  }
  return out;
}

void check_specs(const json& j, const std::vector<TensorSpec>& want, const char* key,
                 const std::string& what) {
  const json expected = format::parse_json(render_specs(want).dump());
  if (j != expected)
    refuse(what, std::string(key) + " do not match the configuration: expected " + expected.dump());
}

}  // namespace

ModelDescription parse_model_json(std::string_view text, const std::string& what) {
  check_json_depth(text, what);
  json j;
  try {
    j = format::parse_json(text);
  } catch (const json::exception& e) {
    refuse(what, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) refuse(what, "not a JSON object");
  // The top level may carry fields a later writer adds (they are ignored), but a required field
  // that is missing beside one lockstep does not know is most likely misspelled: name both.
  if (const std::vector<std::string> extra = unknown_fields(j, kTopFields); !extra.empty()) {
    for (const char* required : {"format", "format_version", "profile", "architecture", "matrix_layout",
                                 "precision", "config", "inputs", "outputs", "parameters",
                                 "parameter_count", "weights", "weights_averaged", "checkpoint"})
      if (!j.contains(required))
        refuse(what, std::string("model.json has no field '") + required + "' but an unknown field " +
                         quoted_key(extra[0]) + " (misspelled?)");
  }
  const std::string format = string_field(j, "format", what, "model.json");
  if (format != kModelFormatName)
    refuse(what, "format '" + format + "' is not a lockstep model ('" + kModelFormatName + "')");
  const json& version = field(j, "format_version", what, "model.json");
  if (!version.is_number_integer()) refuse(what, "format_version is not an integer");
  const bool known_version = version.is_number_unsigned()
                                 ? version.get<uint64_t>() >= static_cast<uint64_t>(kOldestModelFormatVersion) &&
                                       version.get<uint64_t>() <= static_cast<uint64_t>(kModelFormatVersion)
                                 : version.get<int64_t>() >= kOldestModelFormatVersion &&
                                       version.get<int64_t>() <= kModelFormatVersion;
  if (!known_version)
    refuse(what, "format_version " + version.dump() + " is not supported; this lockstep reads format_version " +
                     std::to_string(kOldestModelFormatVersion) + " to " + std::to_string(kModelFormatVersion));
  ModelDescription d;
  d.format_version = static_cast<int>(version.get<int64_t>());
  d.profile = string_field(j, "profile", what, "model.json");
  // Version 1 knew one profile; version 2 names the model's own (docs/FORMAT.md, "Profiles").
  if (d.format_version == 1 && d.profile != profile_name())
    refuse(what, "written for arithmetic profile '" + d.profile + "', but format_version 1 models compute '" +
                     profile_name() + "'");
  if (!find_profile(d.profile))
    refuse(what, "written for arithmetic profile '" + d.profile + "', which this lockstep does not compute (it computes '" +
                     profile_name() + "', '" + int8dot_profile_name() + "' and '" + int8dot_k_profile_name() + "')");
  const std::string arch = string_field(j, "architecture", what, "model.json");
  if (arch != kArchitecture)
    refuse(what, "architecture '" + arch + "' is not one lockstep runs ('" + kArchitecture + "')");
  const std::string layout = string_field(j, "matrix_layout", what, "model.json");
  if (layout != kMatrixLayout)
    refuse(what, "matrix_layout '" + layout + "' is not supported; lockstep stores '" +
                     kMatrixLayout + "' ([in, out], out contiguous)");
  const std::string precision = string_field(j, "precision", what, "model.json");
  try {
    d.precision = parse_precision(precision);
  } catch (const Error& e) {
    refuse(what, e.what());
  }

  const json& cfg = field(j, "config", what, "model.json");
  if (!cfg.is_object()) refuse(what, "config is not a JSON object");
  refuse_unknown_fields(cfg, kConfigFields, what, "config");
  ModelConfig& c = d.config;
  c.vocab_size = int_field(cfg, "vocab_size", what);
  c.length = int_field(cfg, "length", what);
  c.d_model = int_field(cfg, "d_model", what);
  c.n_layers = int_field(cfg, "n_layers", what);
  c.n_heads = int_field(cfg, "n_heads", what);
  c.n_kv_heads = int_field(cfg, "n_kv_heads", what);
  c.d_ff = int_field(cfg, "d_ff", what);
  c.norm_eps = float_field(cfg, "norm_eps", what);
  c.rope_theta = float_field(cfg, "rope_theta", what);
  c.batch = int_field(cfg, "batch", what);
  for (const char* key : {"qkv_bias", "o_bias"}) {
    const auto it = cfg.find(key);
    if (it == cfg.end()) continue;
    if (!it->is_boolean()) refuse(what, std::string("config.") + key + " is not a boolean");
    (std::string(key) == "qkv_bias" ? c.qkv_bias : c.o_bias) = it->get<bool>();
  }
  if (const auto it = cfg.find("rope_scaling"); it != cfg.end()) {
    const json& r = *it;
    if (!r.is_object()) refuse(what, "config.rope_scaling is not a JSON object");
    refuse_unknown_fields(r, kRopeScalingFields, what, "config.rope_scaling");
    if (string_field(r, "type", what, "config.rope_scaling") != "llama3")
      refuse(what, "config.rope_scaling.type is " + r["type"].dump() + "; lockstep knows \"llama3\"");
    RopeScaling s;
    s.factor = float_field(r, "factor", what);
    s.low_freq_factor = float_field(r, "low_freq_factor", what);
    s.high_freq_factor = float_field(r, "high_freq_factor", what);
    s.original_max_position = int_field(r, "original_max_position_embeddings", what);
    c.rope_scaling = s;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    refuse(what, e.what());
  }

  check_specs(field(j, "inputs", what, "model.json"), model_inputs(c), "inputs", what);
  check_specs(field(j, "outputs", what, "model.json"), model_outputs(c), "outputs", what);

  const json& params = field(j, "parameters", what, "model.json");
  const ParameterRegistry registry(c);
  if (!params.is_array() || params.size() != registry.entries().size())
    refuse(what, "parameters must list the " + std::to_string(registry.entries().size()) +
                     " tensors of the registry");
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& e = registry.entries()[i];
    const json& p = params[i];
    const json want = {{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}};
    if (p != want)
      refuse(what, "parameters[" + std::to_string(i) + "] is " + p.dump() + ", expected " + want.dump());
  }
  const json& count = field(j, "parameter_count", what, "model.json");
  if (!count.is_number_integer() || count.get<int64_t>() != registry.total())
    refuse(what, "parameter_count is not " + std::to_string(registry.total()));

  d.weights = parse_weights(field(j, "weights", what, "model.json"), what, "weights");
  // docs/FORMAT.md, "Profiles": the int8dot profile goes with a GGUF weights file and precision
  // f32, and a GGUF weights file with the int8dot profile.
  const bool int8dot = is_int8dot_profile(d.profile), gguf = d.weights.format == kGgufFormat;
  if (int8dot != gguf)
    refuse(what, "profile '" + d.profile + "' does not go with weights.format '" + d.weights.format + "' (profiles '" +
                     int8dot_profile_name() + "' and '" + int8dot_k_profile_name() +
                     "' go with weights.format 'gguf', and only they)");
  if (int8dot && d.precision != Precision::f32)
    refuse(what, "profile '" + d.profile + "' computes under precision f32 only, not '" + precision + "'");
  if (gguf && j.contains("trained_weights") && !j["trained_weights"].is_null())
    refuse(what, "a model whose weights file is GGUF has no trained_weights");
  if (gguf && j.contains("loaded")) refuse(what, "a model whose weights file is GGUF has no loaded parameters");
  const json& averaged = field(j, "weights_averaged", what, "model.json");
  if (!averaged.is_boolean()) refuse(what, "weights_averaged is not true or false");
  d.weights_averaged = averaged.get<bool>();
  if (const auto t = j.find("trained_weights"); t != j.end() && !t->is_null())
    d.trained = parse_weights(*t, what, "trained_weights");
  if (const auto l = j.find("loaded"); l != j.end()) d.loaded = parse_loaded(*l, registry, what);
  if (const auto e = j.find("eos_token_ids"); e != j.end()) d.eos_token_ids = parse_eos_token_ids(*e, c.vocab_size, what);

  const json& ck = field(j, "checkpoint", what, "model.json");
  if (!ck.is_null()) {
    if (!ck.is_object()) refuse(what, "checkpoint is neither null nor an object");
    refuse_unknown_fields(ck, kCheckpointFields, what, "checkpoint");
    if (const auto s = ck.find("step"); s != ck.end() && !s->is_null()) {
      if (!s->is_number_integer() || s->get<int64_t>() < 0)
        refuse(what, "checkpoint.step is not a non-negative integer");
      d.source.step = s->get<int64_t>();
    }
    if (const auto s = ck.find("slug"); s != ck.end() && !s->is_null()) {
      if (!s->is_string()) refuse(what, "checkpoint.slug is not a string");
      d.source.slug = s->get<std::string>();
    }
    if (const auto s = ck.find("path"); s != ck.end() && !s->is_null()) {
      if (!s->is_string()) refuse(what, "checkpoint.path is not a string");
      d.source.checkpoint = s->get<std::string>();
    }
  }
  return d;
}

std::string render_model_json(const ModelDescription& d) {
  const ParameterRegistry registry(d.config);
  ordered j;
  j["format"] = kModelFormatName;
  j["format_version"] = kModelFormatVersion;
  j["architecture"] = kArchitecture;
  j["profile"] = d.profile;
  j["precision"] = precision_name(d.precision);
  j["matrix_layout"] = kMatrixLayout;
  j["config"] = render_config(d.config);
  j["inputs"] = render_specs(model_inputs(d.config));
  j["outputs"] = render_specs(model_outputs(d.config));
  if (d.source.step || d.source.slug || d.source.checkpoint) {
    ordered ck;
    ck["step"] = d.source.step ? ordered(*d.source.step) : ordered(nullptr);
    ck["slug"] = d.source.slug ? ordered(*d.source.slug) : ordered(nullptr);
    ck["path"] = d.source.checkpoint ? ordered(*d.source.checkpoint) : ordered(nullptr);
    j["checkpoint"] = ck;
  } else {
    j["checkpoint"] = nullptr;
  }
  j["weights"] = render_weights(d.weights);
  j["weights_averaged"] = d.weights_averaged;
  j["trained_weights"] = d.trained ? render_weights(*d.trained) : ordered(nullptr);
  if (!d.loaded.empty()) {
    ordered loaded = ordered::array();
    for (const LoadedTensor& l : d.loaded)
      loaded.push_back(
          {{"name", l.name}, {"file", l.file}, {"tensor", l.tensor}, {"sha256", l.sha256}});
    j["loaded"] = loaded;
  }
  if (!d.eos_token_ids.empty()) j["eos_token_ids"] = d.eos_token_ids;
  j["parameter_count"] = registry.total();
  ordered params = ordered::array();
  for (const auto& e : registry.entries())
    params.push_back({{"name", e.name}, {"shape", e.shape}, {"offset", e.offset}});
  j["parameters"] = params;
  return j.dump(2) + "\n";
}

}  // namespace lockstep::format
