// lockstep: train, export, run and serve byte-level decoder language models with the same bits
// on every path.
#include <signal.h>

#include <cstdio>
#include <map>
#include <string>

#include "cli/commands.hpp"

namespace {

// "lockstep" or "lockstep train": the command whose arguments CLI11 refused, for the error line.
std::string command_name(const CLI::App& app) {
  for (const CLI::App* cmd : app.get_subcommands({}))
    if (cmd->parsed()) return "lockstep " + cmd->get_name();
  return "lockstep";
}

}  // namespace

int main(int argc, char** argv) {
  // A file-size limit (ulimit -f) would otherwise end the process at the first write past it
  // with SIGXFSZ, silently and with a temporary left behind; ignored, the write fails with EFBIG
  // and the command's own error path reports it and cleans up (docs/TRAINING.md, "Writing").
  ::signal(SIGXFSZ, SIG_IGN);

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
  add(&lockstep::cli::add_chat);
  add(&lockstep::cli::add_bench);
  add(&lockstep::cli::add_export);
  add(&lockstep::cli::add_export_gguf);
  add(&lockstep::cli::add_import);
  // Every --seed is a 64-bit unsigned integer, refused rather than wrapped when out of range.
  for (auto& [cmd, run] : runs)
    if (CLI::Option* seed = cmd->get_option_no_throw("--seed")) seed->check(lockstep::cli::seed_range());
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Refused arguments are errors like any other: the prefix, one line, status 1.
    const std::string name = command_name(app);
    std::string message = e.what();
    if (name == "lockstep") {
      // No command was recognised: say what came instead of one, and what the commands are.
      std::string commands;
      for (const CLI::App* cmd : app.get_subcommands({}))
        commands += (commands.empty() ? "" : ", ") + cmd->get_name();
      const std::string first = argc > 1 ? argv[1] : "";
      message = argc < 2               ? "a command is required: " + commands
                : first.rfind('-', 0) == 0 ? "unknown option '" + first + "' (the commands are " + commands + ")"
                                         : "unknown command '" + first + "' (the commands are " + commands + ")";
    }
    std::fprintf(stderr, "%s: error: %s (see '%s --help')\n", name.c_str(), message.c_str(), name.c_str());
    return 1;
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
