#include "lockstep/export.hpp"

#include <filesystem>
#include <sstream>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "train/checkpoint.hpp"
#include "train/frozen_loads.hpp"

namespace lockstep {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The lines of `after` that moved from `before`: a longest-common-subsequence diff, removed lines
// as "-N: text" (N in before) and added ones as "+N: text" (N in after).
std::vector<std::string> moved_lines(const std::string& before, const std::string& after) {
  const auto a = lines_of(before), b = lines_of(after);
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> lcs(n + 1, std::vector<int>(m + 1, 0));
  for (size_t i = n; i-- > 0;)
    for (size_t j = m; j-- > 0;) lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::vector<std::string> out;
  auto line = [&out](char sign, size_t number, const std::string& text) {
    std::ostringstream s;
    s << sign << number << ": " << text;
    out.push_back(s.str());
  };
  size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) {
      ++i;
      ++j;
    } else if (j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j])) {
      line('+', j + 1, b[j]);
      ++j;
    } else {
      line('-', i + 1, a[i]);
      ++i;
    }
  }
  return out;
}

}  // namespace

ExportResult export_model(const std::string& checkpoint, const std::string& dir, const ExportOptions& options) {
  if (!options.pack.empty() && options.pack != format::kQ8Format && options.pack != format::kQ4Format)
    throw Error(ErrorKind::invalid_argument, "unknown packing '" + options.pack + "'; lockstep packs q8 and q4");
  if (format::path_exists(dir))
    throw Error(ErrorKind::invalid_argument, "'" + dir + "' already exists; export writes a new directory");
  const ResolvedPath resolved = resolve_model_path(checkpoint);
  if (!resolved.checkpoint_step || !format::path_exists(resolved.model_dir + "/" + train::kTrainingFile))
    throw Error(ErrorKind::invalid_argument,
                "'" + resolved.model_dir + "' is a model directory, not a checkpoint; export takes a checkpoint "
                "step directory or a checkpoint location");
  const train::Checkpoint ck = train::read_checkpoint(resolved.model_dir);
  ExportResult result;
  result.checkpoint = resolved.model_dir;
  result.step = ck.step;
  result.slug = ck.model.source.slug.value_or("");
  result.config = ck.model.config;
  if (!options.run_file.empty()) {
    const RunSpec run = read_run_file(options.run_file);
    ModelConfig edited = run.model;
    if (!(edited == ck.model.config))
      throw Error(ErrorKind::invalid_argument,
                  options.run_file + ": its model configuration differs from the checkpoint's (" + resolved.model_dir +
                      "/" + train::kRunFileCopy + "); export runs the model the checkpoint trained");
    // A frozen parameter's values come from its file: the run file must name the checkpoint's.
    train::check_same_loads(ck.model.loaded, train::read_frozen_loads(run, ParameterRegistry(run.model)).recorded,
                     "cannot export " + resolved.model_dir + " with " + options.run_file + ": ");
    result.moved_lines = moved_lines(ck.run_text, run.text);
  }
  const bool averaged = !options.trained && !ck.state.ema.empty();
  const std::vector<float>& weights = averaged ? ck.state.ema : ck.state.parameters;


  format::AtomicDirectory out(dir);
  format::ModelDescription d;
  d.config = ck.model.config;
  d.profile = profile_name();
  d.precision = ck.model.precision;
  d.source.step = ck.step;
  d.source.slug = ck.model.source.slug;
  d.source.checkpoint = resolved.model_dir;  // as the caller named it: no machine's paths added
  d.weights_averaged = averaged;
  const std::string weights_path = out.file(format::kWeightsFile);
  if (options.pack == format::kQ8Format || options.pack == format::kQ4Format) {
    const bool q4 = options.pack == format::kQ4Format;
    const std::vector<float> expanded = q4 ? format::write_weights_q4(weights_path, d.config, weights)
                                           : format::write_weights_q8(weights_path, d.config, weights);
    d.weights = {format::kWeightsFile, options.pack, sha256_f32_le(expanded)};
  } else {
    format::write_weights(weights_path, d.config, weights);
    d.weights = {format::kWeightsFile, "float32", sha256_f32_le(weights)};
  }
  format::write_file_synced(out.file("model.json"), format::render_model_json(d));
  const ParameterRegistry registry(d.config);
  result.tensors = 0;
  for (const auto& e : registry.entries())
    result.tensors += (!options.pack.empty() && e.shape.size() == 2) ? 2 : 1;
  result.bytes = std::filesystem::file_size(weights_path);
  result.weight_format = d.weights.format;
  out.commit();
  return result;
}

}  // namespace lockstep
