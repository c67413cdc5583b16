// The lockstep command: one file per subcommand; each registers its flags on the CLI11 app and
// runs after parsing. Only argv handling and printing live here; the work is the library's.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "lockstep/format.hpp"
#include "lockstep/model.hpp"

namespace lockstep::cli {

// A subcommand's entry: returns the process exit status.
using Run = std::function<int()>;

Run add_init(CLI::App& app);
Run add_inspect(CLI::App& app);
Run add_call(CLI::App& app);
Run add_serve(CLI::App& app);
Run add_train(CLI::App& app);  // `train`, with the alias `run`
Run add_eval(CLI::App& app);
Run add_generate(CLI::App& app);
Run add_chat(CLI::App& app);
Run add_bench(CLI::App& app);
Run add_export(CLI::App& app);
Run add_export_gguf(CLI::App& app);
Run add_import(CLI::App& app);  // `import hf`, `import gguf`

// The --device, --cpu-cores and --simd flags (with LOCKSTEP_DEVICE, LOCKSTEP_CPU_CORES and
// LOCKSTEP_SIMD).
struct DeviceFlags {
  std::string device = "cpu";
  std::string cpu_cores;  // as given; empty: not given (one thread per physical core)
  std::string simd;       // a SIMD target of simd_targets() for --device cpu; empty: the best
  void add_to(CLI::App& cmd);
  // Parsed and checked; throws lockstep::Error.
  LoadOptions load_options() const;
};

// The model a subcommand loads: the positional MODEL (a model directory, checkpoint step or
// checkpoint location), --trained, and with_device the DeviceFlags.
struct ModelFlags {
  std::string path;
  bool trained = false;
  DeviceFlags device;
  void add_to(CLI::App& cmd, const std::string& positional = "MODEL", bool with_device = true);
  // The device's options (checked) with `trained`; throws lockstep::Error.
  LoadOptions load_options() const;
};

// The checks main() adds to every subcommand's `--seed`: a decimal integer in [0, 2^64 - 1]
// (CLI11 alone would wrap "-1" or 2^64 into range).
CLI::Validator seed_range();

// "109.8 KiB"
std::string human_bytes(double bytes);
// How a model directory's text becomes ids, as `inspect` and `import` print it after
// "tokenizer  ": its tokenizer (type, file, pieces, sha256), "bytes (...)" for a vocabulary of
// 256 without one, else "none: token ids only (...)". One rule for every command.
std::string tokenizer_line(const std::string& model_dir, int32_t vocab_size);
// `name` checked as a --simd value (a target of simd_targets(), for the cpu device only);
// throws lockstep::Error naming the targets this CPU runs.
std::string checked_simd_target(const std::string& name, Device device);
// "1,234,567"
std::string with_commas(int64_t n);
// "[1, 256, 256]"
std::string shape_text(const std::vector<int64_t>& shape);
// "  inputs  inputs [1, 16] i32" / "  outputs logits [1, 16, 256] f32" lines, as serve prints them.
std::string io_lines(const std::vector<TensorSpec>& inputs, const std::vector<TensorSpec>& outputs);

}  // namespace lockstep::cli
