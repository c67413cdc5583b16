#include <cstdio>
#include <limits>
#include <optional>

#include "cli/commands.hpp"
#include "lockstep/tokenizer.hpp"

namespace lockstep::cli {

void DeviceFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--device", device, "where the model runs: cpu, reference, cuda (calls and bench, in builds with CUDA)")
      ->envname("LOCKSTEP_DEVICE");
  cmd.add_option("--cpu-cores", cpu_cores, "most worker threads --device cpu uses (positive integer)")
      ->type_name("INT")
      ->envname("LOCKSTEP_CPU_CORES");
  cmd.add_option("--simd", simd, "the SIMD target of --device cpu (the same bits on each; default: the best here)")
      ->type_name("TARGET")
      ->envname("LOCKSTEP_SIMD");
}

namespace {

// `text` as a decimal integer that fits in 64 bits, or nullopt (signs, spaces, other characters,
// anything past 2^64 - 1).
std::optional<uint64_t> decimal(const std::string& text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  unsigned __int128 value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  return static_cast<uint64_t>(value);
}

}  // namespace

LoadOptions DeviceFlags::load_options() const {
  LoadOptions o;
  o.device = parse_device(device);
  o.threads = 0;
  if (!cpu_cores.empty()) {
    const std::string range = "[1, " + std::to_string(max_threads) + "]";
    const bool digits = cpu_cores.find_first_not_of("0123456789") == std::string::npos;
    if (!digits)
      throw Error(ErrorKind::invalid_argument,
                  "--cpu-cores must be an integer in " + range + ", got '" + cpu_cores + "'");
    const std::optional<uint64_t> n = decimal(cpu_cores);
    if (!n || *n < 1 || *n > static_cast<uint64_t>(max_threads))
      throw Error(ErrorKind::invalid_argument, "--cpu-cores must be in " + range + ", got " + cpu_cores);
    o.threads = static_cast<int>(*n);
  }
  o.simd_target = checked_simd_target(simd, o.device);
  return o;
}

std::string checked_simd_target(const std::string& name, Device device) {
  if (name.empty()) return name;
  std::string known;
  for (const std::string& t : simd_targets()) {
    if (t == name) {
      if (device != Device::cpu)
        throw Error(ErrorKind::invalid_argument,
                    std::string("--simd chooses the kernels of --device cpu, not of --device ") + device_name(device));
      return name;
    }
    known += (known.empty() ? "" : ", ") + t;
  }
  throw Error(ErrorKind::invalid_argument, "--simd: '" + name + "' is not a SIMD target this CPU runs; it runs " + known);
}

CLI::Validator seed_range() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (decimal(text)) return {};
        return "must be an integer in [0, 18446744073709551615] (2^64 - 1), got '" + text + "'";
      },
      "", "seed_range");
}

void ModelFlags::add_to(CLI::App& cmd, const std::string& positional, bool with_device) {
  cmd.add_option(positional, path, "a model directory, checkpoint step or checkpoint location")->required();
  cmd.add_flag("--trained", trained, "a checkpoint's trained weights instead of its averages");
  if (with_device) device.add_to(cmd);
}

LoadOptions ModelFlags::load_options() const {
  LoadOptions o = device.load_options();
  o.trained = trained;
  return o;
}

std::string tokenizer_line(const std::string& model_dir, int32_t vocab_size) {
  if (const std::unique_ptr<Tokenizer> t = Tokenizer::for_model(model_dir))
    return std::string(t->type()) + " " + t->file() + ", " + std::to_string(t->size()) + " pieces, sha256 " + t->sha256();
  if (vocab_size == 256) return "bytes (the ids are the text's UTF-8 bytes)";
  return "none: token ids only (no tokenizer for its " + std::to_string(vocab_size) + " ids; text is refused)";
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f %s", bytes, units[u]);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", bytes, units[u]);
  }
  return buf;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string io_lines(const std::vector<TensorSpec>& inputs, const std::vector<TensorSpec>& outputs) {
  std::string out;
  for (size_t i = 0; i < inputs.size(); ++i)
    out += std::string(i == 0 ? "  inputs  " : "          ") + inputs[i].name + " " +
           shape_text(inputs[i].shape) + " " + inputs[i].dtype + "\n";
  for (size_t i = 0; i < outputs.size(); ++i)
    out += std::string(i == 0 ? "  outputs " : "          ") + outputs[i].name + " " +
           shape_text(outputs[i].shape) + " " + outputs[i].dtype + "\n";
  return out;
}

}  // namespace lockstep::cli
