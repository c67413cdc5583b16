// lockstep: train, export, run and serve byte-level decoder language models with the same bits
// on every path.
#include <cstdio>
#include <map>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"lockstep: deterministic byte-level language models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lockstep 0.1.0, arithmetic profile ") + lockstep::profile_name());
  std::map<CLI::App*, lockstep::cli::Run> runs;
  auto add = [&](lockstep::cli::Run (*registrar)(CLI::App&)) {
    const size_t before = app.get_subcommands({}).size();
    lockstep::cli::Run run = registrar(app);
    runs[app.get_subcommands({})[before]] = std::move(run);
  };
  add(&lockstep::cli::add_init);
  add(&lockstep::cli::add_inspect);
  add(&lockstep::cli::add_call);
  add(&lockstep::cli::add_serve);
  add(&lockstep::cli::add_train);
  add(&lockstep::cli::add_eval);
  add(&lockstep::cli::add_generate);
  add(&lockstep::cli::add_bench);
  add(&lockstep::cli::add_export);
  add(&lockstep::cli::add_export_gguf);
  add(&lockstep::cli::add_import);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  for (auto& [cmd, run] : runs) {
    if (!cmd->parsed()) continue;
    try {
      return run();
    } catch (const lockstep::Error& e) {
      std::fprintf(stderr, "lockstep %s: error: %s\n", cmd->get_name().c_str(), e.what());
      return 1;
    } catch (const std::bad_alloc&) {
      std::fprintf(stderr, "lockstep %s: error: out of memory\n", cmd->get_name().c_str());
      return 1;
    }
  }
  return 1;
}
