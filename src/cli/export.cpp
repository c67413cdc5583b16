// lockstep export: a checkpoint's model as a model directory of its own.
#include <cstdio>

#include "cli/commands.hpp"
#include "lockstep/export.hpp"

namespace lockstep::cli {

Run add_export(CLI::App& app) {
  struct Flags {
    std::string run_file, checkpoint, out, pack;
    bool trained = false;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("export", "write a checkpoint's model and weights as a model directory");
  cmd->add_option("RUN_FILE", f->run_file, "the run file, compared with the checkpoint's copy (optional)");
  cmd->add_option("--checkpoint", f->checkpoint, "a checkpoint step directory, or a location (its newest step)")->required();
  cmd->add_option("-o,--output", f->out, "the directory to write (must not exist)")->required();
  cmd->add_flag("--trained", f->trained, "the trained weights instead of the EMA averages");
  cmd->add_option("--pack", f->pack,
                  "q8: int8 weights with one f32 scale per output column; q4: 4-bit weights with one f32 scale "
                  "per 32 inputs per output column");
  return [f] {
    ExportOptions options;
    options.run_file = f->run_file;
    options.trained = f->trained;
    options.pack = f->pack;
    const ExportResult r = export_model(f->checkpoint, f->out, options);
    std::printf("export: %s\n", r.checkpoint.c_str());
    for (const std::string& line : r.moved_lines) std::printf("  %s\n", line.c_str());
    std::printf("wrote %s: %lld weights, %s%s\n", f->out.c_str(), static_cast<long long>(r.tensors),
                human_bytes(static_cast<double>(r.bytes)).c_str(), r.weight_format == "q8" ? " (q8)" : (r.weight_format == "q4" ? " (q4)" : ""));
    std::fputs(io_lines(model_inputs(r.config), model_outputs(r.config)).c_str(), stdout);
    return 0;
  };
}

}  // namespace lockstep::cli
