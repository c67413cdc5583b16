// Stopping `lockstep train` from outside: SIGINT and SIGTERM finish the step under way, write
// its checkpoint, name the command that resumes it and exit 130 / 143, and the resumed run ends
// with the bits of an uninterrupted one; a second signal ends it at once. A file-size limit
// (SIGXFSZ) is an ordinary write error. The library side (RunOptions::stop) is tested directly.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

bool has(const std::string& text, const std::string& want) { return text.find(want) != std::string::npos; }

// Starts argv with stdout and stderr into the files `out` and `err`; returns the child's pid.
// `file_limit` > 0: the child's RLIMIT_FSIZE, with SIGXFSZ left at its default action.
pid_t start(const std::vector<std::string>& argv, const std::string& out, const std::string& err,
            rlim_t file_limit = 0) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_DFL);
    if (file_limit > 0) {
      const rlimit limit = {file_limit, file_limit};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    if (!std::freopen(out.c_str(), "w", stdout) || !std::freopen(err.c_str(), "w", stderr)) ::_exit(126);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid` at most `seconds` (then kills it and fails); returns its wait status.
int wait_bounded(pid_t pid, int seconds = 120) {
  const auto began = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() - began > std::chrono::seconds(seconds)) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      ADD_FAILURE() << "the command did not end within " << seconds << " s";
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

// Waits until the run has logged a step (metrics.jsonl holds a line): it is in its loop.
bool wait_for_a_step(const std::string& ck, pid_t pid) {
  const auto began = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - began < std::chrono::seconds(120)) {
    if (::access((ck + "/metrics.jsonl").c_str(), F_OK) == 0 &&
        test::read_file(ck + "/metrics.jsonl").find('\n') != std::string::npos)
      return true;
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

void stops_cleanly_and_resumes(int sig, int want_status, const std::string& name) {
  test::TempDir dir;
  // Many steps, no scheduled checkpoint before the end: all a stop keeps is its own checkpoint.
  const std::string run = test::write_tiny_run(
      dir, {{":steps", "100000"}, {":checkpoint-every", "0"}, {":eval-every", "0"}});
  const std::string ck = dir / "stopped";
  const pid_t pid = start({kBin, "train", run, "--checkpoint-dir", ck, "--cpu-cores", "1"}, dir / "out.txt",
                          dir / "err.txt");
  ASSERT_TRUE(wait_for_a_step(ck, pid)) << test::read_file(dir / "err.txt");
  ::kill(pid, sig);
  const int status = wait_bounded(pid);
  const std::string err = test::read_file(dir / "err.txt");
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status) << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), want_status) << err;

  // "lockstep train: stopped by SIGINT after step N of 100000; checkpoint CK/step-0000000N"
  const std::string head = "lockstep train: stopped by " + name + " after step ";
  const size_t at = err.find(head);
  ASSERT_NE(at, std::string::npos) << err;
  const int64_t step = std::stoll(err.substr(at + head.size()));
  ASSERT_GE(step, 1);
  ASSERT_LT(step, 100000);
  EXPECT_TRUE(has(err, " of 100000; checkpoint " + ck + "/" + step_directory_name(step) + "\n")) << err;
  EXPECT_EQ(list_checkpoint_steps(ck), std::vector<int64_t>{step});
  EXPECT_TRUE(test::temporaries_in(ck).empty());
  EXPECT_EQ(test::metrics_loss_bits(ck + "/metrics.jsonl").size(), static_cast<size_t>(step));
  EXPECT_TRUE(has(test::read_file(dir / "out.txt"), "checkpoint " + ck + "/" + step_directory_name(step)));

  // The command it names, run as given (plus an earlier end), resumes to an uninterrupted run's bits.
  const std::string says = "  resume with: ";
  const size_t r = err.find(says);
  ASSERT_NE(r, std::string::npos) << err;
  const std::string command = err.substr(r + says.size(), err.find('\n', r) - r - says.size());
  EXPECT_EQ(command, kBin + " train " + run + " --checkpoint-dir " + ck + " --resume");
  std::vector<std::string> argv = words(command);
  const std::string end = std::to_string(step + 3);
  argv.insert(argv.end(), {"--steps", end, "--cpu-cores", "1"});
  const auto resumed = test::run_command(argv);
  ASSERT_EQ(resumed.status, 0) << resumed.err;
  const auto straight =
      test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "straight", "--steps", end, "--cpu-cores", "2"});
  ASSERT_EQ(straight.status, 0) << straight.err;
  const std::string last = "/" + step_directory_name(step + 3);
  const auto want = test::checkpoint_files(dir / "straight" + last);
  const auto got = test::checkpoint_files(ck + last);
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [file, bytes] : want) EXPECT_TRUE(got.at(file) == bytes) << file;
  EXPECT_EQ(Model::load(ck + last)->parameters_sha256(), Model::load(dir / "straight" + last)->parameters_sha256());
  EXPECT_EQ(test::metrics_loss_bits(ck + "/metrics.jsonl"), test::metrics_loss_bits(dir / "straight/metrics.jsonl"));
}

TEST(CliTrainStop, SigintWritesACheckpointAndNamesTheResumeCommand) { stops_cleanly_and_resumes(SIGINT, 130, "SIGINT"); }

TEST(CliTrainStop, SigtermDoesTheSameWithStatus143) { stops_cleanly_and_resumes(SIGTERM, 143, "SIGTERM"); }

TEST(CliTrainStop, ASecondSignalEndsAtOnceWithoutACheckpoint) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(
      dir, {{":steps", "100000"}, {":checkpoint-every", "0"}, {":eval-every", "0"}});
  const std::string ck = dir / "ck";
  const pid_t pid = start({kBin, "train", run, "--checkpoint-dir", ck, "--cpu-cores", "2"}, dir / "out.txt",
                          dir / "err.txt");
  ASSERT_TRUE(wait_for_a_step(ck, pid));
  // Two signals that arrive together: stopped, the process cannot run between them, so both
  // are pending when it continues and the second finds the first's stop already asked for.
  // (Two SIGINTs pending at once would merge into one: standard signals do not queue.)
  ::kill(pid, SIGSTOP);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
  ASSERT_TRUE(WIFSTOPPED(status));
  ::kill(pid, SIGINT);
  ::kill(pid, SIGTERM);
  ::kill(pid, SIGCONT);
  status = wait_bounded(pid);
  const std::string err = test::read_file(dir / "err.txt");
  ASSERT_TRUE(WIFEXITED(status)) << err;
  // 128 + the second signal's number: which of the two a thread takes first is the kernel's.
  EXPECT_TRUE(WEXITSTATUS(status) == 130 || WEXITSTATUS(status) == 143) << WEXITSTATUS(status) << "\n" << err;
  EXPECT_TRUE(has(err, "lockstep train: stopped at once; complete checkpoints are kept")) << err;
  EXPECT_FALSE(has(err, "resume with")) << err;
  // No checkpoint was due: none was written, and nothing looks like one.
  EXPECT_TRUE(list_checkpoint_steps(ck).empty());
  const auto again = test::run_command({kBin, "train", run, "--checkpoint-dir", ck, "--steps", "2"});
  EXPECT_EQ(again.status, 0) << again.err;
  EXPECT_TRUE(test::temporaries_in(ck).empty());
}

TEST(CliTrainStop, CtrlCInAPipelineStillWritesTheCheckpoint) {
  // `lockstep train ... | tee log` and Ctrl-C: the reader of standard output ends with the
  // run. Here the pipe's reader is closed while the run is stopped, then SIGINT and SIGCONT.
  test::TempDir dir;
  const std::string run = test::write_tiny_run(
      dir, {{":steps", "100000"}, {":checkpoint-every", "0"}, {":eval-every", "0"}});
  const std::string ck = dir / "ck";
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    if (!std::freopen((dir / "err.txt").c_str(), "w", stderr)) ::_exit(126);
    ::execl(kBin.c_str(), kBin.c_str(), "train", run.c_str(), "--checkpoint-dir", ck.c_str(), "--cpu-cores", "1",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(out[1]);
  ASSERT_TRUE(wait_for_a_step(ck, pid));
  ::kill(pid, SIGSTOP);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, WUNTRACED), pid);
  ::close(out[0]);
  ::kill(pid, SIGINT);
  ::kill(pid, SIGCONT);
  status = wait_bounded(pid);
  const std::string err = test::read_file(dir / "err.txt");
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status) << "\n" << err;
  EXPECT_EQ(WEXITSTATUS(status), 130) << err;
  ASSERT_EQ(list_checkpoint_steps(ck).size(), 1u) << err;
  EXPECT_TRUE(has(err, "checkpoint " + ck + "/" + step_directory_name(list_checkpoint_steps(ck)[0]))) << err;
}

TEST(CliTrainStop, AFileSizeLimitIsAWriteErrorNotASilentDeath) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir, {{":eval-every", "0"}});
  // Files may not grow past 8 KiB (a checkpoint's weights file is 19 KiB); SIGXFSZ at its
  // default action, which ends a process that does not ignore it.
  const pid_t pid = start({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--steps", "4"}, "/dev/null",
                          dir / "err.txt", 8192);
  const int status = wait_bounded(pid);
  const std::string err = test::read_file(dir / "err.txt");
  ASSERT_TRUE(WIFEXITED(status)) << "ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_TRUE(has(err, "lockstep train: error: cannot write checkpoint step 4 in '" + dir / "ck" + "': ")) << err;
  EXPECT_TRUE(has(err, "params.safetensors: cannot write: File too large")) << err;
  EXPECT_TRUE(has(err, "; there is no complete checkpoint")) << err;
  EXPECT_TRUE(list_checkpoint_steps(dir / "ck").empty());
  EXPECT_TRUE(test::temporaries_in(dir / "ck").empty());
}

// The library: a stop asked for during step 5 (here by the observer) ends the run after it with
// a checkpoint of step 5; one asked for before the first step writes nothing.
class StopAt : public RunObserver {
 public:
  StopAt(std::atomic<bool>& stop, int64_t at) : stop_(stop), at_(at) {}
  void step(const StepReport& r) override {
    if (r.step == at_) stop_.store(true);
  }

 private:
  std::atomic<bool>& stop_;
  int64_t at_;
};

TEST(RunStop, EndsAfterTheStepUnderWayWithItsCheckpoint) {
  test::TempDir dir;
  const RunSpec spec = read_run_file(test::write_tiny_run(dir, {{":checkpoint-every", "4"}}));
  std::atomic<bool> stop{false};
  StopAt observer(stop, 5);
  RunOptions options;
  options.threads = 1;
  options.stop = &stop;
  options.observer = &observer;
  const RunResult r = run_training(spec, dir / "ck", options);
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.last_step, 5);
  EXPECT_EQ(r.last_checkpoint, dir / "ck/step-00000005");
  EXPECT_EQ(list_checkpoint_steps(dir / "ck"), (std::vector<int64_t>{4, 5}));

  // Stopping at a scheduled checkpoint's step writes it once.
  std::atomic<bool> stop8{false};
  StopAt at8(stop8, 8);
  options.stop = &stop8;
  options.observer = &at8;
  options.resume = true;
  const RunResult r8 = run_training(spec, dir / "ck", options);
  EXPECT_TRUE(r8.stopped);
  EXPECT_EQ(r8.last_step, 8);
  EXPECT_EQ(list_checkpoint_steps(dir / "ck"), (std::vector<int64_t>{4, 5, 8}));

  // Already stopped: nothing trained or written.
  std::atomic<bool> stopped{true};
  options.stop = &stopped;
  options.observer = nullptr;
  const RunResult none = run_training(spec, dir / "ck", options);
  EXPECT_TRUE(none.stopped);
  EXPECT_EQ(none.first_step, 8);
  EXPECT_EQ(none.last_step, 8);
  EXPECT_EQ(list_checkpoint_steps(dir / "ck"), (std::vector<int64_t>{4, 5, 8}));

  // Resumed without a stop, it ends where an uninterrupted run does, with its bits.
  options.stop = nullptr;
  const RunResult rest = run_training(spec, dir / "ck", options);
  EXPECT_FALSE(rest.stopped);
  EXPECT_EQ(rest.last_step, 12);
  RunOptions plain;
  plain.threads = 1;
  run_training(spec, dir / "straight", plain);
  EXPECT_EQ(Model::load(dir / "ck")->parameters_sha256(), Model::load(dir / "straight")->parameters_sha256());
}

}  // namespace
}  // namespace lockstep
