// libFuzzer target: any bytes as model.json. parse_model_json must either refuse them with a
// format Error naming the file, or return a description that renders to a model.json which
// parses back to the same description and renders to the same text.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "format/model_json.hpp"
#include "lockstep/error.hpp"

namespace {

using lockstep::format::ModelDescription;
using lockstep::format::WeightsFile;

const std::string kWhat = "fuzz/model.json";

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "model.json round trip broke a promise: %s\n", promise);
  __builtin_trap();
}

bool same(const WeightsFile& a, const WeightsFile& b) {
  return a.file == b.file && a.format == b.format && a.sha256 == b.sha256;
}

bool same(const ModelDescription& a, const ModelDescription& b) {
  // Config floats compared as bits: == would let -0.0 stand for +0.0.
  return a.config == b.config &&
         std::memcmp(&a.config.norm_eps, &b.config.norm_eps, sizeof(float)) == 0 &&
         std::memcmp(&a.config.rope_theta, &b.config.rope_theta, sizeof(float)) == 0 &&
         a.profile == b.profile && a.precision == b.precision && a.source.step == b.source.step &&
         a.source.slug == b.source.slug && a.source.checkpoint == b.source.checkpoint &&
         same(a.weights, b.weights) && a.weights_averaged == b.weights_averaged &&
         a.trained.has_value() == b.trained.has_value() && (!a.trained || same(*a.trained, *b.trained));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  ModelDescription parsed;
  try {
    parsed = lockstep::format::parse_model_json(text, kWhat);
  } catch (const lockstep::Error& e) {
    const std::string message = e.what();
    if (e.kind() != lockstep::ErrorKind::format || message.rfind(kWhat + ": ", 0) != 0)
      broken("a refusal is a format error that starts with the file");
    return 0;
  }
  const std::string rendered = lockstep::format::render_model_json(parsed);
  ModelDescription again;
  try {
    again = lockstep::format::parse_model_json(rendered, "rendered");
  } catch (const lockstep::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    broken("what was read renders to a model.json that reads back");
  }
  if (!same(parsed, again)) broken("render then parse gives the same description");
  if (lockstep::format::render_model_json(again) != rendered) broken("rendering is stable");
  return 0;
}
