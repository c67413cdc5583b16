// lockstep train (alias: run): train a run file into a checkpoint directory, with a live progress
// line on a terminal and plain lines otherwise. The work and metrics.jsonl are the library's.
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep::cli {
namespace {

std::string duration_text(double seconds) {
  if (!(seconds >= 0.0) || seconds > 1e8) return "?";
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  } else if (s >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  }
  return buf;
}

std::string loss_text(float loss) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4f (%.3f bits/byte)", static_cast<double>(loss),
                static_cast<double>(loss) / std::log(2.0));
  return buf;
}

// Prints what the run reports: on a terminal one line redrawn in place (at most ten times a
// second, and at every evaluation), elsewhere a plain line at the first and last steps, at
// evaluations and at least every ten seconds.
class Progress : public RunObserver {
 public:
  explicit Progress(bool terminal) : terminal_(terminal) {}

  void started(const RunStart& s) override {
    std::printf("train: run %s, %s parameters (%s as f32), %s tokens a step\n", s.slug.c_str(),
                with_commas(s.parameters).c_str(),
                human_bytes(static_cast<double>(s.parameters) * 4.0).c_str(),
                with_commas(s.tokens_per_step).c_str());
    std::printf("  data        %s file%s: %s bytes for training, %s held out\n",
                with_commas(s.data_files).c_str(), s.data_files == 1 ? "" : "s",
                with_commas(s.train_bytes).c_str(), with_commas(s.held_out_bytes).c_str());
    if (s.resumed) {
      std::printf("  resumed     from %s\n", s.resumed_from.c_str());
    }
    std::printf("  steps       %lld to %lld on %d thread%s\n", static_cast<long long>(s.first_step + 1),
                static_cast<long long>(s.last_step), s.threads, s.threads == 1 ? "" : "s");
    std::printf("  checkpoints %s\n", s.checkpoint_dir.c_str());
    std::fflush(stdout);
    first_ = s.first_step + 1;
  }

  void step(const StepReport& r) override {
    if (r.held_out_loss) held_out_ = r.held_out_loss;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - printed_).count();
    const bool milestone = r.held_out_loss || r.step == r.last_step || r.step == first_;
    if (!milestone && since < (terminal_ ? 0.1 : 10.0)) return;
    printed_ = now;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "step %lld/%lld  loss %.4f", static_cast<long long>(r.step),
                  static_cast<long long>(r.last_step), static_cast<double>(r.loss));
    std::string line = buf;
    const std::optional<float> held = terminal_ ? held_out_ : r.held_out_loss;
    if (held) line += "  held-out " + loss_text(*held);
    std::snprintf(buf, sizeof(buf), "  lr %.3g  %s tok/s  %s left", static_cast<double>(r.lr),
                  with_commas(std::llround(r.tokens_per_second)).c_str(),
                  duration_text(r.seconds_left).c_str());
    line += buf;
    if (terminal_) {
      // Cut to the terminal's width: a wrapped line could not be redrawn in place.
      winsize size{};
      if (::ioctl(1, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 && line.size() >= size.ws_col)
        line.resize(size.ws_col - 1u);
      std::printf("\r\033[K%s", line.c_str());
      live_ = true;
    } else {
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }

  void checkpoint(const CheckpointReport& c) override {
    end_line();
    std::printf("checkpoint %s", c.path.c_str());
    for (size_t i = 0; i < c.removed.size(); ++i)
      std::printf("%s%s", i == 0 ? " (removed " : ", ", step_directory_name(c.removed[i]).c_str());
    std::printf("%s\n", c.removed.empty() ? "" : ")");
    std::fflush(stdout);
    // Redraw the live line after the message on the next step.
    printed_ = {};
  }

  void end_line() {
    if (live_) std::printf("\n");
    live_ = false;
  }

 private:
  bool terminal_;
  bool live_ = false;
  int64_t first_ = 1;
  std::optional<float> held_out_;
  std::chrono::steady_clock::time_point printed_{};
};

}  // namespace

Run add_train(CLI::App& app) {
  struct Flags {
    std::string run_file;
    std::string dir;
    int64_t steps = 0;
    bool resume = false;
    DeviceFlags device;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd =
      app.add_subcommand("train", "train a run file (.sx) into a checkpoint directory");
  cmd->alias("run");
  cmd->add_option("RUN_FILE", f->run_file, "the run file, a (defrun NAME :key value ...) form")->required();
  cmd->add_option("--checkpoint-dir", f->dir, "where step-NNNNNNNN checkpoints and metrics.jsonl go")
      ->required();
  cmd->add_option("--steps", f->steps, "the step to end at, instead of the run file's :steps");
  cmd->add_flag("--resume", f->resume, "continue from the newest complete checkpoint in --checkpoint-dir");
  f->device.add_to(*cmd);
  return [f, cmd] {
    const RunSpec spec = read_run_file(f->run_file);
    const LoadOptions device = f->device.load_options();
    RunOptions options;
    options.device = device.device;
    options.threads = device.threads;
    options.resume = f->resume;
    if (cmd->count("--steps") > 0) {
      if (f->steps < 1 || f->steps > 1000000000)
        throw Error(ErrorKind::invalid_argument,
                    "--steps must be in [1, 1000000000], got " + std::to_string(f->steps));
      options.steps = f->steps;
    }
    Progress progress(::isatty(1) == 1);
    options.observer = &progress;
    RunResult result;
    try {
      result = run_training(spec, f->dir, options);
    } catch (...) {
      progress.end_line();
      std::fflush(stdout);
      throw;
    }
    progress.end_line();
    if (result.last_step == result.first_step) {
      std::printf("train: already at step %lld; nothing to do (--steps sets a later end)\n",
                  static_cast<long long>(result.last_step));
    } else {
      std::printf("train: done, step %lld", static_cast<long long>(result.last_step));
      if (result.held_out_loss) std::printf(", held-out loss %s", loss_text(*result.held_out_loss).c_str());
      std::printf("\n");
    }
    std::printf("  model       %s\n", result.last_checkpoint.c_str());
    return 0;
  };
}

}  // namespace lockstep::cli
