// lockstep train (alias: run): train a run file into a checkpoint directory, with a live progress
// line on a terminal and plain lines otherwise. The work and metrics.jsonl are the library's.
// SIGINT / SIGTERM stop the run cleanly (a checkpoint, then the command to resume); a second one
// ends the process at once.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "lockstep/training_run.hpp"

namespace lockstep::cli {
namespace {

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
  explicit Progress(bool terminal) : line_(stdout, terminal) {}

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
    const bool milestone = r.held_out_loss || r.step == r.last_step || r.step == first_;
    if (!line_.due(milestone)) return;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "step %lld/%lld  loss %.4f", static_cast<long long>(r.step),
                  static_cast<long long>(r.last_step), static_cast<double>(r.loss));
    std::string line = buf;
    const std::optional<float> held = line_.terminal() ? held_out_ : r.held_out_loss;
    if (held) line += "  held-out " + loss_text(*held);
    std::snprintf(buf, sizeof(buf), "  lr %.3g  %s tok/s  %s left", static_cast<double>(r.lr),
                  with_commas(std::llround(r.tokens_per_second)).c_str(),
                  duration_text(r.seconds_left).c_str());
    line += buf;
    line_.show(line);
  }

  void checkpoint(const CheckpointReport& c) override {
    end_line();
    std::printf("checkpoint %s", c.path.c_str());
    for (size_t i = 0; i < c.removed.size(); ++i)
      std::printf("%s%s", i == 0 ? " (removed " : ", ", step_directory_name(c.removed[i]).c_str());
    std::printf("%s\n", c.removed.empty() ? "" : ")");
    std::fflush(stdout);
    // Redraw the live line after the message on the next step.
    line_.reset();
  }

  void end_line() { line_.end_line(); }

 private:
  LiveLine line_;
  int64_t first_ = 1;
  std::optional<float> held_out_;
};

// The stop request the signal handler sets and the run polls (RunOptions::stop), and the signal
// that set it. A handler can only reach process-wide state, hence these two statics.
static_assert(std::atomic<bool>::is_always_lock_free && std::atomic<int>::is_always_lock_free);
std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};
// A rank under mpirun: Ctrl-C reaches it twice, from the terminal (the whole foreground process
// group gets SIGINT) and a moment later from mpirun (which passes the stop on as SIGTERM). Both
// are one request, so a second signal within `one_request_ns` of the first is not "the second".
std::atomic<bool> under_mpirun{false};
std::atomic<int64_t> first_signal_ns{0};
constexpr int64_t one_request_ns = 2'000'000'000;

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

extern "C" void on_stop_signal(int sig) {
  if (stop_requested.load() && under_mpirun.load() && monotonic_ns() - first_signal_ns.load() < one_request_ns)
    return;
  first_signal_ns.store(monotonic_ns());
  if (stop_requested.exchange(true)) {
    // The second signal: end now. Checkpoints are renamed into place whole, so at most a
    // temporary is left, which the next run removes.
    static const char message[] = "\nlockstep train: stopped at once; complete checkpoints are kept\n";
    [[maybe_unused]] const ssize_t n = ::write(2, message, sizeof(message) - 1);
    ::_exit(128 + sig);
  }
  stop_signal.store(sig);
  // Ctrl-C in `lockstep train ... | tee log` ends the reader too: from now on a write to the
  // vanished pipe fails instead of killing the process before its checkpoint is written.
  struct sigaction ignore;
  std::memset(&ignore, 0, sizeof(ignore));
  ignore.sa_handler = SIG_IGN;
  ::sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, nullptr);
}

void install_stop_handlers() {
  // Open MPI's mpirun names the job's size in every rank's environment.
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  under_mpirun.store(size != nullptr && std::atoi(size) > 1);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// `arg` as a POSIX shell reads it back: bare when it holds only safe characters, else in single
// quotes.
std::string shell_word(const std::string& arg) {
  bool bare = !arg.empty();
  for (const char c : arg)
    bare = bare && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("_-./:=@%+,", c) != nullptr);
  if (bare) return arg;
  std::string out = "'";
  for (const char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Run add_train(CLI::App& app) {
  struct Flags {
    std::string run_file;
    std::string dir;
    int64_t steps = 0;
    bool resume = false;
    std::string progress = "auto";
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
  cmd->add_option("--progress", f->progress,
                  "auto (a line redrawn on a terminal, plain lines under mpirun or elsewhere), plain or live")
      ->default_str("auto");
  f->device.add_to(*cmd);
  return [f, cmd, &app] {
    const RunSpec spec = read_run_file(f->run_file);
    const LoadOptions device = f->device.load_options();
    RunOptions options;
    options.device = device.device;
    options.threads = device.threads;
    options.simd_target = device.simd_target;
    options.resume = f->resume;
    if (cmd->count("--steps") > 0) {
      if (f->steps < 1 || f->steps > 1000000000)
        throw Error(ErrorKind::invalid_argument,
                    "--steps must be in [1, 1000000000], got " + std::to_string(f->steps));
      options.steps = f->steps;
    }
    Progress progress(progress_is_live(parse_progress_mode(f->progress), 1));
    options.observer = &progress;
    options.stop = &stop_requested;
    // LOCKSTEP_PHASE_TIMES=1 (bench/mpi_scaling.sh): every rank prints where its time went.
    const char* phase_env = std::getenv("LOCKSTEP_PHASE_TIMES");
    options.phase_times = phase_env != nullptr && std::string(phase_env) == "1";
    install_stop_handlers();
    RunResult result;
    try {
      result = run_training(spec, f->dir, options);
    } catch (...) {
      progress.end_line();
      std::fflush(stdout);
      throw;
    }
    if (options.phase_times)
      std::fprintf(stderr, "lockstep train: rank %d of %d phase seconds (wall/cpu): %s\n", result.rank, result.ranks,
                   result.phase_times.c_str());
    progress.end_line();
    std::fflush(stdout);
    if (result.rank != 0) return result.stopped ? 128 + (stop_signal.load() == SIGTERM ? SIGTERM : SIGINT) : 0;
    if (result.stopped) {
      const int sig = stop_signal.load();
      // The command that continues this run: the program as it was called, the same run file,
      // directory and end step.
      std::string again = shell_word(app.get_name().empty() ? "lockstep" : app.get_name()) + " " +
                          cmd->get_name() + " " + shell_word(f->run_file) + " --checkpoint-dir " +
                          shell_word(f->dir) + " --resume";
      if (options.steps) again += " --steps " + std::to_string(*options.steps);
      if (result.last_step == result.first_step) {
        std::fprintf(stderr, "lockstep train: stopped by %s before the first step; nothing was written\n",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT");
        if (!result.last_checkpoint.empty()) std::fprintf(stderr, "  resume with: %s\n", again.c_str());
      } else {
        std::fprintf(stderr, "lockstep train: stopped by %s after step %lld of %lld; checkpoint %s\n",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<long long>(result.last_step),
                     static_cast<long long>(options.steps.value_or(spec.steps)),
                     result.last_checkpoint.c_str());
        std::fprintf(stderr, "  resume with: %s\n", again.c_str());
      }
      return 128 + (sig == SIGTERM ? SIGTERM : SIGINT);
    }
    if (result.last_step == result.first_step) {
      std::printf("train: already at step %lld; nothing to do (--steps sets a later end)\n",
                  static_cast<long long>(result.last_step));
    } else {
      std::printf("train: done, step %lld", static_cast<long long>(result.last_step));
      if (result.held_out_loss) std::printf(", held-out loss %s", loss_text(*result.held_out_loss).c_str());
      std::printf("\n");
    }
    std::printf("  model       %s\n", result.last_checkpoint.c_str());
    if (result.ranks > 1)
      std::printf("  ranks       %d; rank 0 sent %s (%s bytes) and waited %.3f s for the others\n", result.ranks,
                  human_bytes(static_cast<double>(result.bytes_sent)).c_str(), with_commas(result.bytes_sent).c_str(),
                  result.seconds_waiting);
    return 0;
  };
}

}  // namespace lockstep::cli
