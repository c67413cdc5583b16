// lockstep init: a randomly initialised model directory, for tests and benchmarks.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <new>
#include <system_error>

#include "cli/commands.hpp"

namespace lockstep::cli {
namespace {

// What init holds at once: the f32 parameters (written from that one copy).
std::string init_bytes_text(const ModelConfig& config) {
  const int64_t n = config.parameter_count();
  return "the model has " + with_commas(n) + " parameters, " + with_commas(n * 4) + " bytes (" +
         human_bytes(static_cast<double>(n) * 4.0) + ") as f32";
}

// Refuses, before allocating, a model larger than the machine's physical memory.
void check_memory_for_init(const ModelConfig& config) {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return;
  const double physical = static_cast<double>(pages) * static_cast<double>(page);
  if (static_cast<double>(config.parameter_count()) * 4.0 > physical)
    throw Error(ErrorKind::invalid_argument,
                init_bytes_text(config) + ", more than this machine's " + human_bytes(physical) +
                    " of memory");
}

}  // namespace

Run add_init(CLI::App& app) {
  struct Flags {
    uint64_t seed = 0;
    std::string out;
    ModelConfig config;
    int n_kv_heads = 0;
    std::string precision = "f32";
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("init", "write a randomly initialised model directory");
  cmd->add_option("--seed", f->seed, "initialisation seed")->required();
  cmd->add_option("-o,--output", f->out, "the model directory to create (must not exist; missing parents are created)")->required();
  ModelConfig& c = f->config;
  cmd->add_option("--vocab-size", c.vocab_size, "token ids in [0, N); 256 is bytes")->capture_default_str();
  cmd->add_option("--length", c.length, "window: most positions a row holds")->capture_default_str();
  cmd->add_option("--d-model", c.d_model, "residual width")->capture_default_str();
  cmd->add_option("--n-layers", c.n_layers, "decoder blocks")->capture_default_str();
  cmd->add_option("--n-heads", c.n_heads, "attention heads")->capture_default_str();
  cmd->add_option("--n-kv-heads", f->n_kv_heads, "key/value heads (default: n-heads)");
  cmd->add_option("--d-ff", c.d_ff, "SwiGLU hidden width")->capture_default_str();
  cmd->add_option("--norm-eps", c.norm_eps, "RMSNorm epsilon")->capture_default_str();
  cmd->add_option("--rope-theta", c.rope_theta, "RoPE base")->capture_default_str();
  cmd->add_option("--batch", c.batch, "training batch rows (the loss layout)")->capture_default_str();
  cmd->add_option("--precision", f->precision, "f32 or bf16")->capture_default_str();
  return [f] {
    ModelConfig config = f->config;
    config.n_kv_heads = f->n_kv_heads > 0 ? f->n_kv_heads : config.n_heads;
    config.validate();  // past max_parameters: refused with the bytes they would need
    ModelMetadata meta;
    meta.precision = parse_precision(f->precision);
    check_memory_for_init(config);
    std::vector<float> params;
    try {
      params = init_parameters(config, f->seed);
      // Missing parent folders are created, as train creates its --checkpoint-dir's.
      const std::filesystem::path parent = std::filesystem::path(f->out).parent_path();
      std::error_code ec;
      if (!parent.empty() && !std::filesystem::is_directory(parent, ec)) {
        std::filesystem::create_directories(parent, ec);
        if (ec)
          throw Error(ErrorKind::io, "cannot create the parent folder '" + parent.string() + "' of '" + f->out +
                                         "': " + ec.message());
      }
      write_model_directory(f->out, config, params, meta);
    } catch (const std::bad_alloc&) {
      throw Error(ErrorKind::invalid_argument,
                  init_bytes_text(config) + ", which this machine could not allocate (out of memory)");
    }
    std::printf("init: wrote %s: %s parameters, %s\n", f->out.c_str(),
                with_commas(static_cast<int64_t>(params.size())).c_str(),
                human_bytes(static_cast<double>(params.size()) * 4.0).c_str());
    std::fputs(io_lines(model_inputs(config), model_outputs(config)).c_str(), stdout);
    return 0;
  };
}

}  // namespace lockstep::cli
