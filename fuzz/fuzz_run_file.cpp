// libFuzzer target: any bytes as a run file. parse_run_file must either refuse them with a
// format Error whose message starts with "FILE:LINE:COLUMN: ", or return a run that keeps its
// promises: the text as given, a slug, data files, a configuration that validates and :load
// parameters of its registry.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "lockstep/error.hpp"
#include "lockstep/training_run.hpp"

namespace {

const std::string kFile = "fuzz/run.sx";

[[noreturn]] void broken(const char* promise) {
  std::fprintf(stderr, "run file parsing broke a promise: %s\n", promise);
  __builtin_trap();
}

// "fuzz/run.sx:" then digits, ':', digits, ": ".
bool starts_with_position(const std::string& m) {
  if (m.rfind(kFile + ":", 0) != 0) return false;
  size_t i = kFile.size() + 1;
  for (int part = 0; part < 2; ++part) {
    const size_t begin = i;
    while (i < m.size() && m[i] >= '0' && m[i] <= '9') ++i;
    if (i == begin || i >= m.size() || m[i] != ':') return false;
    ++i;
  }
  return i < m.size() && m[i] == ' ';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  lockstep::RunSpec run;
  try {
    run = lockstep::parse_run_file(text, kFile);
  } catch (const lockstep::Error& e) {
    if (e.kind() != lockstep::ErrorKind::format || !starts_with_position(e.what()))
      broken("a refusal is a format error that starts with FILE:LINE:COLUMN");
    return 0;
  }
  if (run.text != text) broken("the run keeps its text");
  if (run.slug.empty()) broken("the run has a slug");
  if (run.data.empty()) broken("the run names data");
  for (const std::string& d : run.data)
    if (d.empty()) broken("data paths are not empty");
  try {
    run.model.validate();
    const lockstep::ParameterRegistry registry(run.model);
    for (const auto& l : run.load)
      if (registry.find(l.parameter) < 0) broken(":load names registry parameters");
  } catch (const lockstep::Error&) {
    broken("an accepted configuration validates");
  }
  if (!(run.lr > 0.0f) || !(run.lr_min > 0.0f) || run.lr_min > run.lr) broken("0 < lr-min <= lr");
  if (run.held_out_ppm < 0 || run.held_out_ppm >= 1000000) broken("held-out in [0, 1)");
  if (run.steps < 1 || run.eval_batches < 1) broken("steps and eval-batches positive");
  return 0;
}
