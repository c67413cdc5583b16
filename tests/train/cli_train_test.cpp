// `lockstep train` / `run` / `eval` end to end: their output, SIGKILL at any moment (including
// while a checkpoint is being written) never leaves a checkpoint that looks complete but is not
// and resumes to the same bits, and a full disk while writing leaves the previous checkpoint
// intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/rng.hpp"
#include "kernels/cuda/device.hpp"
#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

bool has(const std::string& text, const std::string& want) { return text.find(want) != std::string::npos; }

TEST(CliTrain, TrainsResumesAndReports) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  const auto r = test::run_command(
      {kBin, "train", run, "--checkpoint-dir", dir / "ck", "--steps", "8", "--cpu-cores", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  // Not a terminal: plain lines, one at each evaluation, and each checkpoint.
  for (const char* want :
       {"train: run tiny-test, 4,664 parameters", "16 tokens a step", "steps       1 to 8 on 2 threads",
        "step 1/8  loss 5.5", "step 4/8  loss ", "step 8/8  loss ", "held-out ", " bits/byte)", " tok/s  ",
        "checkpoint ", "step-00000004\n", "train: done, step 8, held-out loss "})
    EXPECT_TRUE(has(r.out, want)) << want << "\n" << r.out;
  EXPECT_FALSE(has(r.out, "\r")) << r.out;
  EXPECT_TRUE(has(r.out, "  model       " + dir / "ck/step-00000008\n")) << r.out;
  // `run` is the same command; --resume continues.
  const auto again = test::run_command({kBin, "run", run, "--checkpoint-dir", dir / "ck", "--resume"});
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_TRUE(has(again.out, "  resumed     from " + dir / "ck/step-00000008\n")) << again.out;
  EXPECT_TRUE(has(again.out, "steps       9 to 12")) << again.out;
  EXPECT_EQ(list_checkpoint_steps(dir / "ck"), (std::vector<int64_t>{4, 8, 12}));
  const auto done = test::run_command({kBin, "run", run, "--checkpoint-dir", dir / "ck", "--resume"});
  EXPECT_EQ(done.status, 0) << done.err;
  EXPECT_TRUE(has(done.out, "train: already at step 12; nothing to do")) << done.out;
  // metrics.jsonl: one line per step.
  const auto losses = test::metrics_loss_bits(dir / "ck/metrics.jsonl");
  EXPECT_EQ(losses.size(), 12u);
  // --simd: every SIMD target this CPU runs trains the same losses, bit for bit.
  for (const std::string& target : simd_targets()) {
    const std::string ck = dir / ("ck-" + target);
    const auto t = test::run_command({kBin, "train", run, "--checkpoint-dir", ck, "--steps", "4", "--simd", target});
    ASSERT_EQ(t.status, 0) << target << t.err;
    const auto bits = test::metrics_loss_bits(ck + "/metrics.jsonl");
    EXPECT_EQ(bits.size(), 4u) << target;
    for (const auto& [step, loss] : bits) EXPECT_EQ(loss, losses.at(step)) << target << " step " << step;
  }
}

TEST(CliTrain, RefusalsAreErrorsWithWhere) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  auto fails = [&](const std::vector<std::string>& args, const std::string& says) {
    std::vector<std::string> argv = {kBin};
    argv.insert(argv.end(), args.begin(), args.end());
    const auto r = test::run_command(argv);
    EXPECT_NE(r.status, 0) << says;
    EXPECT_TRUE(has(r.err, says)) << says << "\n" << r.err;
  };
  test::write_file(dir / "bad.sx", "(defrun bad :data \"x\"\n  :lenght 3)");
  fails({"train", dir / "bad.sx", "--checkpoint-dir", dir / "c"},
        "lockstep train: error: " + dir / "bad.sx" +
            ":2:3: :lenght is not a defrun key (did you mean :length?); valid keys: :batch");
  fails({"train", dir / "none.sx", "--checkpoint-dir", dir / "c"},
        dir / "none.sx" + ": cannot open: No such file");
  fails({"train", run, "--checkpoint-dir", dir / "c", "--steps", "0"},
        "--steps must be in [1, 1000000000], got 0");
  fails({"train", run}, "--checkpoint-dir is required");
  fails({"train", run, "--checkpoint-dir", dir / "c", "--device", "cuda"},
        cuda::compiled_in() ? "training does not run on device 'cuda'" : "device 'cuda' is not built into this lockstep");
  ASSERT_EQ(test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "c", "--steps", "2"}).status, 0);
  fails({"train", run, "--checkpoint-dir", dir / "c"},
        "already holds checkpoints (newest: step 2); continue them with --resume");
  test::write_file(dir / "empty.txt", "");
  test::write_file(dir / "empty.sx", test::tiny_run_text(dir / "empty.txt"));
  fails({"train", dir / "empty.sx", "--checkpoint-dir", dir / "e"},
        "data file '" + dir / "empty.txt" + "' is empty");
}

TEST(CliEval, PrintsTheMeanLossAndItsBits) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  ASSERT_EQ(test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--steps", "4"}).status,
            0);
  // 100 bytes with length 8: 12 full windows and a last one of 3 predictions.
  test::write_file(dir / "eval.txt", test::text_data(100, 5));
  const auto model = Model::load(dir / "ck");
  const ByteEvaluation e = evaluate_file(*model, dir / "eval.txt");
  EXPECT_EQ(e.bytes, 100);
  EXPECT_EQ(e.predictions, 99);
  EXPECT_EQ(e.windows, 13);
  // The same sum by hand: every window's token losses in order.
  const std::string bytes = test::read_file(dir / "eval.txt");
  float total = 0.0f;
  for (int64_t start = 0; start < 99; start += 8) {
    const int64_t n = std::min<int64_t>(9, 100 - start);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t)
      ids[static_cast<size_t>(t)] = static_cast<uint8_t>(bytes[static_cast<size_t>(start + t)]);
    for (float l : model->token_losses({ids.data(), 1, n})) total = total + l;
  }
  EXPECT_EQ(e.loss_bits, std::bit_cast<uint32_t>(total / 99.0f));

  // 5,001 bytes: 625 windows, more than one forward call's group (evaluate.cpp groups about
  // 512K logits, 256 windows of this model), and the same bits as the windows one at a time.
  const std::string long_text = test::text_data(5001, 6);
  const ByteEvaluation grouped =
      evaluate_bytes(*model, {reinterpret_cast<const uint8_t*>(long_text.data()), long_text.size()});
  EXPECT_EQ(grouped.windows, 625);
  float long_total = 0.0f;
  for (int64_t start = 0; start < 5000; start += 8) {
    std::vector<int32_t> ids(9);
    for (int64_t t = 0; t < 9; ++t)
      ids[static_cast<size_t>(t)] = static_cast<uint8_t>(long_text[static_cast<size_t>(start + t)]);
    for (float l : model->token_losses({ids.data(), 1, 9})) long_total = long_total + l;
  }
  EXPECT_EQ(grouped.loss_bits, std::bit_cast<uint32_t>(long_total / 5000.0f));

  char bits[32];
  std::snprintf(bits, sizeof(bits), "(f32 bits 0x%08x)", e.loss_bits);
  for (const char* device : {"cpu", "reference"}) {
    const auto r =
        test::run_command({kBin, "eval", dir / "ck", "--data", dir / "eval.txt", "--device", device});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(has(r.out, "model      " + dir / "ck/step-00000004 (step 4 of run tiny-test)\n")) << r.out;
    EXPECT_TRUE(has(
        r.out, "data       " + dir / "eval.txt: 100 bytes, 99 predictions in 13 windows of up to 9 bytes\n"))
        << r.out;
    EXPECT_TRUE(has(r.out, bits)) << r.out;
    char bpb[64];
    std::snprintf(bpb, sizeof(bpb), "bits/byte  %.6f\n", e.bits_per_byte);
    EXPECT_TRUE(has(r.out, bpb)) << r.out;
  }
  const auto trained = test::run_command({kBin, "eval", dir / "ck", "--data", dir / "eval.txt", "--trained"});
  EXPECT_EQ(trained.status, 0);
  EXPECT_FALSE(has(trained.out, bits)) << "the trained weights are not the averages";
  test::write_file(dir / "one.txt", "x");
  const auto one = test::run_command({kBin, "eval", dir / "ck", "--data", dir / "one.txt"});
  EXPECT_NE(one.status, 0);
  EXPECT_TRUE(has(one.err, "holds 1 bytes; evaluation needs at least 2")) << one.err;
  const auto missing = test::run_command({kBin, "eval", dir / "ck", "--data", dir / "none.txt"});
  EXPECT_NE(missing.status, 0);
  EXPECT_TRUE(has(missing.err, dir / "none.txt" + ": cannot open")) << missing.err;
}

// Every complete checkpoint reads back whole: its files, SHA-256s and the model.
void expect_complete_checkpoints_whole(const std::string& dir) {
  for (int64_t step : list_checkpoint_steps(dir)) {
    const std::string path = dir + "/" + step_directory_name(step);
    try {
      train::read_checkpoint(path);
      Model::load(path);
    } catch (const Error& e) {
      ADD_FAILURE() << path << " looks complete but is not: " << e.what();
    }
  }
}

TEST(CliTrain, KilledAtAnyMomentResumesToTheSameBits) {
  test::TempDir dir;
  // A checkpoint every step, so that much of the time goes into writing them.
  const std::string run = test::write_tiny_run(
      dir, {{":steps", "30"}, {":checkpoint-every", "1"}, {":keep", "3"}, {":eval-every", "5"}});
  ASSERT_EQ(test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "straight", "--cpu-cores", "1"})
                .status,
            0);

  // The test counts the kills it needs instead of hoping a timing yields them: rounds go on until
  // kKills SIGKILLs have landed, at least one of them while a checkpoint was being written. The
  // moments are observed on disk, not timed: in two rounds of three, a temporary step directory
  // (a checkpoint being written), then 0-2 ms; in the third, the newest complete checkpoint
  // advancing past the one the round started from (the next step being computed), then 0-2 ms.
  // A run that reaches step 30 before enough kills (a fast or lucky machine) is rolled back one
  // step, its step-00000030 removed, so that the next round has work left to interrupt: resuming
  // from step 29 must give the same bits as well.
  constexpr int kKills = 8;
  constexpr uint64_t kMaxRounds = 300;
  const std::string ck = dir / "killed";
  auto newest = [&] {
    const std::vector<int64_t> steps = list_checkpoint_steps(ck);
    return steps.empty() ? int64_t{0} : steps.back();
  };
  int kills = 0, kills_mid_write = 0, rollbacks = 0;
  uint64_t round = 0;
  for (; round < kMaxRounds && (kills < kKills || kills_mid_write < 1); ++round) {
    if (newest() == 30) {
      std::filesystem::remove_all(ck + "/" + step_directory_name(30));
      ++rollbacks;
    }
    const int64_t from = newest();
    std::vector<std::string> argv = {kBin, "train", run, "--checkpoint-dir", ck, "--cpu-cores", "1"};
    if (from > 0) argv.push_back("--resume");
    const pid_t pid = test::spawn(argv);
    const bool mid_write = round % 3 != 2;
    const auto delay = std::chrono::microseconds(random_below(2000, 17, 1, round));
    const auto began = std::chrono::steady_clock::now();
    int status = 0;
    bool exited = false;
    for (;;) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        break;
      }
      if (mid_write ? !test::temporaries_in(ck).empty() : newest() > from) break;
      if (std::chrono::steady_clock::now() - began > std::chrono::seconds(60)) break;  // kill anyway
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (!exited) {
      std::this_thread::sleep_for(delay);
      ::kill(pid, SIGKILL);
      ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    }
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++kills;
      if (!test::temporaries_in(ck).empty()) ++kills_mid_write;
      expect_complete_checkpoints_whole(ck);
    } else {
      // Finished before the kill landed: a clean exit, and no kill counted.
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "round " << round;
    }
  }
  std::printf("%d kills, %d while a checkpoint was being written, %d rollbacks, in %d rounds\n", kills,
              kills_mid_write, rollbacks, static_cast<int>(round));
  ASSERT_GE(kills, kKills) << "fewer kills than asked for in " << kMaxRounds << " rounds";
  ASSERT_GE(kills_mid_write, 1) << "no kill landed while a checkpoint was being written";
  // Let the run finish.
  if (newest() != 30) {
    const auto r =
        test::run_command({kBin, "train", run, "--checkpoint-dir", ck, "--cpu-cores", "1", "--resume"});
    ASSERT_EQ(r.status, 0) << r.err;
  }
  ASSERT_EQ(list_checkpoint_steps(ck).back(), 30);
  EXPECT_TRUE(test::temporaries_in(ck).empty());
  const auto want = test::checkpoint_files(dir / "straight/step-00000030");
  const auto got = test::checkpoint_files(ck + "/step-00000030");
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, bytes] : want) EXPECT_TRUE(got.at(name) == bytes) << name;
  EXPECT_EQ(test::metrics_loss_bits(dir / "straight/metrics.jsonl"),
            test::metrics_loss_bits(ck + "/metrics.jsonl"));
}

TEST(CliTrain, AFullDiskWhileWritingLeavesThePreviousCheckpoint) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir, {{":eval-every", "0"}});
  ASSERT_EQ(test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--steps", "4"}).status,
            0);
  const auto before = test::checkpoint_files(dir / "ck");
  // A child whose files may not grow past 8 KiB (a checkpoint's weights file is 19 KiB), with
  // SIGXFSZ ignored so that write(2) fails with EFBIG as on a full disk.
  const std::string err_path = dir / "stderr.txt";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit = {8192, 8192};
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::freopen(err_path.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    ::execl(kBin.c_str(), kBin.c_str(), "train", run.c_str(), "--checkpoint-dir", (dir / "ck").c_str(),
            "--resume", "--steps", "8", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string err = test::read_file(err_path);
  EXPECT_TRUE(has(err, "lockstep train: error: cannot write checkpoint step 8 in '" + dir / "ck" + "': "))
      << err;
  EXPECT_TRUE(has(err, "params.safetensors: cannot write: File too large")) << err;
  EXPECT_TRUE(has(err, "; the newest complete checkpoint, step 4, is intact")) << err;
  // Step 4 as it was, nothing else but metrics.jsonl, and it resumes.
  EXPECT_EQ(list_checkpoint_steps(dir / "ck"), (std::vector<int64_t>{4}));
  EXPECT_TRUE(test::temporaries_in(dir / "ck").empty());
  const auto after = test::checkpoint_files(dir / "ck");
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [name, bytes] : before) EXPECT_TRUE(after.at(name) == bytes) << name;
  const auto resumed =
      test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--resume", "--steps", "8"});
  EXPECT_EQ(resumed.status, 0) << resumed.err;
  EXPECT_EQ(list_checkpoint_steps(dir / "ck"), (std::vector<int64_t>{4, 8}));
}

}  // namespace
}  // namespace lockstep
