// What `lockstep eval` shows while it works (progress on standard error, the result alone on
// standard output), and what `train` says about a relative :data path it cannot open.
#include <gtest/gtest.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#include <sstream>
#include <stdexcept>

#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

bool has(const std::string& text, const std::string& want) { return text.find(want) != std::string::npos; }

TEST(CliEvalProgress, PlainLinesOnStandardErrorWhenItIsNotATerminal) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  ASSERT_EQ(test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--steps", "4"}).status, 0);
  // 5,001 bytes with length 8: 625 windows in three forward calls of up to 256 windows.
  test::write_file(dir / "eval.txt", test::text_data(5001, 6));
  const auto model = Model::load(dir / "ck");
  std::vector<std::pair<int64_t, int64_t>> calls;
  const ByteEvaluation e =
      evaluate_file(*model, dir / "eval.txt", {}, [&](int64_t done, int64_t total) { calls.push_back({done, total}); });
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{2048, 5000}, {4096, 5000}, {5000, 5000}}));
  EXPECT_EQ(e.loss_bits, evaluate_file(*model, dir / "eval.txt").loss_bits);

  const auto r = test::run_command({kBin, "eval", dir / "ck", "--data", dir / "eval.txt"});
  ASSERT_EQ(r.status, 0) << r.err;
  // Standard error: no redrawing, a line at the first call and one at the end.
  EXPECT_FALSE(has(r.err, "\r")) << r.err;
  EXPECT_TRUE(has(r.err, "eval 2,048/5,000 bytes (40%)  ")) << r.err;
  EXPECT_TRUE(has(r.err, "eval 5,000/5,000 bytes (100%)  ")) << r.err;
  EXPECT_TRUE(has(r.err, " bytes/s  ")) << r.err;
  std::istringstream lines(r.err);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.rfind("eval ", 0), 0u) << line;
  // Standard output: the four lines of the result and nothing else.
  char loss[64];
  std::snprintf(loss, sizeof(loss), "loss       %.9g (f32 bits 0x%08x)\n", static_cast<double>(e.loss), e.loss_bits);
  char bpb[64];
  std::snprintf(bpb, sizeof(bpb), "bits/byte  %.6f\n", e.bits_per_byte);
  EXPECT_EQ(r.out, "model      " + dir / "ck/step-00000004 (step 4 of run tiny-test)\n" + "data       " +
                       dir / "eval.txt: 5,001 bytes, 5,000 predictions in 625 windows of up to 9 bytes\n" + loss + bpb);
}

// Runs argv with its standard streams on a new terminal (a pseudo-terminal); returns what it
// wrote there, waiting at most a minute.
std::string run_on_a_terminal(const std::vector<std::string>& argv) {
  int master = -1;
  const pid_t pid = ::forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) throw std::runtime_error("forkpty failed");
  if (pid == 0) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  std::string out;
  const auto began = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - began < std::chrono::seconds(60)) {
    pollfd p = {master, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(master, buf, sizeof(buf));
    if (n <= 0) break;  // EIO once the child has closed the terminal
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(master);
  int status = 0;
  ::kill(pid, SIGKILL);  // no-op once it has ended
  ::waitpid(pid, &status, 0);
  return out;
}

TEST(CliEvalProgress, OneLineRedrawnInPlaceOnATerminal) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  ASSERT_EQ(test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--steps", "4"}).status, 0);
  test::write_file(dir / "eval.txt", test::text_data(5001, 6));
  const std::string out = run_on_a_terminal({kBin, "eval", dir / "ck", "--data", dir / "eval.txt"});
  // The first and last calls at least, each redrawing the line; the line ended before the result.
  EXPECT_TRUE(has(out, "\r\033[Keval 2,048/5,000 bytes (40%)")) << out;
  EXPECT_TRUE(has(out, "\r\033[Keval 5,000/5,000 bytes (100%)")) << out;
  const size_t end = out.find("(100%)");
  ASSERT_NE(end, std::string::npos);
  EXPECT_LT(end, out.find("model      "));
  EXPECT_TRUE(has(out, "bits/byte  ")) << out;
}

// Open MPI gives each rank a pseudo-terminal, so a rank's isatty is true even when mpirun's
// output goes to a file (issue 42: 59 KB of redraw codes in a log). Under mpirun's environment
// `--progress auto` prints plain lines; `live` and `plain` choose either way anywhere.
TEST(CliTrainProgress, PlainLinesUnderMpirunEvenOnATerminalAndTheFlagChooses) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  const std::string redraw = "\r\033[K";
  const std::string live = run_on_a_terminal({kBin, "train", run, "--checkpoint-dir", dir / "a", "--steps", "3"});
  EXPECT_TRUE(has(live, redraw)) << live;
  for (const char* rank_env : {"OMPI_COMM_WORLD_SIZE=2", "PMI_SIZE=2", "PMIX_RANK=0"}) {
    const std::string out = run_on_a_terminal(
        {"/usr/bin/env", rank_env, kBin, "train", run, "--checkpoint-dir", dir / rank_env, "--steps", "3"});
    EXPECT_FALSE(has(out, redraw)) << rank_env << ": " << out;
    EXPECT_TRUE(has(out, "train: done, step 3")) << out;
  }
  const std::string plain = run_on_a_terminal(
      {kBin, "train", run, "--checkpoint-dir", dir / "p", "--steps", "3", "--progress", "plain"});
  EXPECT_FALSE(has(plain, redraw)) << plain;
  EXPECT_TRUE(has(plain, "train: done, step 3")) << plain;
  const auto forced = test::run_command(
      {kBin, "train", run, "--checkpoint-dir", dir / "l", "--steps", "3", "--progress", "live"});
  EXPECT_EQ(forced.status, 0) << forced.err;
  EXPECT_TRUE(has(forced.out, redraw)) << forced.out;
  const auto bad = test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "b", "--progress", "fancy"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_TRUE(has(bad.err, "--progress must be auto, plain or live, got 'fancy'")) << bad.err;
}

TEST(CliTrainData, AMissingRelativeDataPathNamesTheFullPathTried) {
  test::TempDir dir;
  char* real = ::realpath(dir.path().c_str(), nullptr);
  ASSERT_NE(real, nullptr);
  const std::string where = real;
  ::free(real);
  test::write_file(dir / "here.txt", test::text_data(3000, 2));
  test::write_file(dir / "run.sx", test::tiny_run_text("here.txt"));
  test::write_file(dir / "missing.sx", test::tiny_run_text("sub/missing.txt"));
  // Read from the current directory: found from `dir`.
  const auto ok = test::run_command(
      {"env", "-C", dir.path(), kBin, "train", "run.sx", "--checkpoint-dir", "ck", "--steps", "1"});
  EXPECT_EQ(ok.status, 0) << ok.err;
  const auto r = test::run_command(
      {"env", "-C", dir.path(), kBin, "train", "missing.sx", "--checkpoint-dir", "ck2", "--steps", "1"});
  EXPECT_EQ(r.status, 1);
  EXPECT_TRUE(has(r.err, "lockstep train: error: data file 'sub/missing.txt': No such file or directory (tried " +
                             where + "/sub/missing.txt: relative :data paths are read from the current directory)"))
      << r.err;
}

}  // namespace
}  // namespace lockstep
