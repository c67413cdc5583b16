#include <cstdio>

#include "cli/commands.hpp"

namespace lockstep::cli {

void DeviceFlags::add_to(CLI::App& cmd) {
  cmd.add_option("--device", device, "where the model runs: cpu, reference (cuda, metal: not built in)")
      ->envname("LOCKSTEP_DEVICE");
  cmd.add_option("--cpu-cores", cpu_cores, "most worker threads --device cpu uses (positive integer)")
      ->envname("LOCKSTEP_CPU_CORES");
}

LoadOptions DeviceFlags::load_options() const {
  LoadOptions o;
  o.device = parse_device(device);
  if (cpu_cores != 0 && (cpu_cores < 1 || cpu_cores > max_threads))
    throw Error(ErrorKind::invalid_argument, "--cpu-cores must be in [1, " +
                                                 std::to_string(max_threads) + "], got " +
                                                 std::to_string(cpu_cores));
  o.threads = cpu_cores;
  return o;
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
