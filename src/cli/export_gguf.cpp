// lockstep export-gguf: a model as a GGUF file for llama.cpp (docs/FORMAT.md, "GGUF export").
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/interop.hpp"

namespace lockstep::cli {

Run add_export_gguf(CLI::App& app) {
  struct Flags {
    std::string model, out, type = "f32", name;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("export-gguf", "write a model as a GGUF file (llama.cpp's llama architecture, or qwen2 for one with q, k, v biases)");
  cmd->add_option("MODEL", f->model, "a model directory, checkpoint step or location")->required();
  cmd->add_option("-o,--output", f->out, "the .gguf file to write (replaced whole if it exists)")->required();
  cmd->add_option("--type", f->type, "f32, f16 or q8_0: how the matrices are stored (norms stay f32)")->capture_default_str();
  cmd->add_option("--name", f->name, "general.name (default: the model directory's name)");
  cmd->footer(
      "llama.cpp computes the same function with its own arithmetic, so its logits differ from\n"
      "lockstep's in the last bits (and by the rounding of f16 or q8_0 weights).");
  return [f] {
    GgufOptions options;
    options.type = f->type;
    options.name = f->name;
    const GgufResult r = export_gguf(f->model, f->out, options);
    std::printf("export-gguf: %s\n", r.model_dir.c_str());
    std::printf("wrote %s: %lld tensors, %s (%s), %s architecture, a vocabulary of %d tokens\n", f->out.c_str(),
                static_cast<long long>(r.tensors), human_bytes(static_cast<double>(r.bytes)).c_str(), r.type.c_str(),
                r.architecture.c_str(), r.config.vocab_size);
    return 0;
  };
}

}  // namespace lockstep::cli
