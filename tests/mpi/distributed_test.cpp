// Data-parallel training (docs/TRAINING.md, "Training on a cluster"): the gradient's chains,
// passed from block to block of rows in order, keep the single process's bits. First in one
// process (the kernels' continued chains and FastStep's BatchPart, no MPI needed), then the
// command under mpirun: the same checkpoints at 1, 2, 3 and 4 ranks as without MPI, a resume
// with another rank count, a rank killed by SIGKILL, and ranks that disagree.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "core/sha256.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/matmul_split.hpp"
#include "train/distributed.hpp"
#include "train/fast_step.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

using test::TempDir;

// ---- in one process ----

// c = a^T @ b over rows [0, K) equals rows [0, k1) then, continued, rows [k1, K), on every target.
TEST(ContinuedChains, MatmulAtOverTwoBlocksOfRowsEqualsTheWhole) {
  const int64_t K = 37, M = 19, N = 45;
  const std::vector<float> a = test::random_floats(K * M, 1), b = test::random_floats(K * N, 2);
  for (const simd::Kernels* k : simd::supported_kernels()) {
    auto product = [&](int64_t k0, int64_t k1, std::vector<float>& c, bool cont) {
      // b's rows [k0, k1) as a packed [k1 - k0, N] matrix.
      simd::PackedMatrix packed = simd::allocate_packed(*k, k1 - k0, N);
      const simd::MatrixPart part[] = {{b.data() + k0 * N, N}};
      simd::pack_panels(part, 1, packed, 0, packed.panels, false);
      std::vector<float> scratch(static_cast<size_t>(k->matmul_at_scratch_floats(M)) + 64);
      (cont ? k->matmul_at_continue : k->matmul_at)(a.data() + k0 * M, M, M, packed, 0, packed.panels, c.data(), N,
                                                    scratch.data());
    };
    std::vector<float> whole(static_cast<size_t>(M * N)), split(static_cast<size_t>(M * N), 7.0f);
    product(0, K, whole, false);
    for (int64_t k1 : {1, 8, 20, 36}) {
      product(0, k1, split, false);
      product(k1, K, split, true);
      EXPECT_TRUE(test::same_bits(whole, split)) << k->name << ", split at row " << k1;
    }
  }
}

TEST(ContinuedChains, NormWeightGradientOverTwoBlocksOfRowsEqualsTheWhole) {
  const int64_t R = 29, n = 70;
  const std::vector<float> x = test::random_floats(R * n, 3), dy = test::random_floats(R * n, 4),
                           inv = test::random_floats(R, 5);
  for (const simd::Kernels* k : simd::supported_kernels()) {
    std::vector<float> whole(static_cast<size_t>(n)), split(static_cast<size_t>(n));
    k->rmsnorm_backward_weight(x.data(), inv.data(), dy.data(), whole.data(), R, n, 0, n);
    for (int64_t r1 : {1, 13, 28}) {
      k->rmsnorm_backward_weight(x.data(), inv.data(), dy.data(), split.data(), r1, n, 0, n);
      k->rmsnorm_backward_weight_continue(x.data() + r1 * n, inv.data() + r1, dy.data() + r1 * n, split.data(),
                                          R - r1, n, 0, n);
      EXPECT_TRUE(test::same_bits(whole, split)) << k->name << ", split at row " << r1;
    }
  }
}

// What the ranks do, in one process: each block of rows continues the chains the blocks before
// left in the gradient buffer; the result is the whole batch's loss and gradient, bit for bit.
TEST(ContinuedChains, FastStepOverBlocksOfRowsEqualsTheWholeBatch) {
  ModelConfig c = test::tiny_gqa_config(8);
  c.batch = 5;
  for (const Precision precision : {Precision::f32, Precision::bf16}) {
    const std::vector<float> params = init_parameters(c, 9);
    std::vector<int32_t> ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 10);
    ids[c.length] = -100;  // an ignored target: the count is the whole batch's
    const train::RopeTables<float> rope(c);
    const auto pool = make_thread_pool(2);
    const int64_t n = ParameterRegistry(c).total();
    train::FastStep whole_step(c, precision, "");
    std::vector<float> whole(static_cast<size_t>(n));
    const float loss = whole_step.loss_and_gradient(*pool, 2, rope, params, ids.data(), c.batch, whole.data());
    int64_t count = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t t = 1; t <= c.length; ++t) count += ids[static_cast<size_t>(b * (c.length + 1) + t)] != -100;
    for (int ranks = 1; ranks <= 4; ++ranks) {
      std::vector<float> grad(static_cast<size_t>(n), 3.0f);
      train::FastStep::BatchPart part;
      part.count = count;
      for (int r = 0; r < ranks; ++r) {
        const auto [b0, b1] = train::rank_rows(c.batch, r, ranks);
        train::FastStep step(c, precision, "");  // each rank's own workspace
        part.total = step.loss_and_gradient(*pool, 1 + r % 2, rope, params, ids.data() + b0 * (c.length + 1), b1 - b0,
                                            grad.data(), &part);
        part.continued = true;
      }
      EXPECT_TRUE(test::same_bits(whole, grad)) << ranks << " blocks, " << precision_name(precision);
      EXPECT_EQ(std::bit_cast<uint32_t>(loss), std::bit_cast<uint32_t>(part.total / static_cast<float>(count)));
    }
  }
}

// A model whose fused gradients' parts (gate|up: d_ff; q|k|v: q_dim, kv_dim) are whole panels
// of every SIMD target (8, 16 or 32 columns), so that linked ranks compute them part by part,
// straight into each part's gradient.
ModelConfig panel_aligned_config() {
  ModelConfig c = test::tiny_config(8);
  c.d_model = 64;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // head_dim 16: q_dim 64, kv_dim 32
  c.d_ff = 96;
  c.batch = 4;
  return c;
}

// The pipelined form in one process: the blocks run one after another over one buffer, so the
// hooks only check the order (every block received and sent once, in increasing order, the loss
// total last) and hand over the total; the bits are the whole batch's. Both forms of the fused
// gradients (through wtemp, and part by part when the parts are whole panels), f32 and bf16, on
// 1 and 2 threads.
TEST(ContinuedChains, PipelinedHooksComeInBackwardOrderAndKeepTheBits) {
  ModelConfig narrow = test::tiny_config(8);
  narrow.batch = 4;
  const ModelConfig wide = panel_aligned_config();
  const int32_t panel = simd::best_kernels().panel_width;
  ASSERT_EQ(wide.d_ff % panel, 0);
  ASSERT_EQ(wide.q_dim() % panel, 0);
  ASSERT_EQ(wide.kv_dim() % panel, 0);
  ASSERT_NE(narrow.d_ff % panel, 0);
  for (const ModelConfig& c : {narrow, wide}) {
    const std::vector<float> params = init_parameters(c, 12);
    const std::vector<int32_t> ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 13);
    const train::RopeTables<float> rope(c);
    const auto pool = make_thread_pool(2);
    const int64_t n = ParameterRegistry(c).total();
    const size_t blocks = train::FastStep::backward_blocks(c).size();
    // One block per tensor: the head, the final norm, nine per layer, the embedding.
    ASSERT_EQ(blocks, 9 * static_cast<size_t>(c.n_layers) + 3);
    std::vector<std::pair<int64_t, int64_t>> sorted = train::FastStep::backward_blocks(c);
    std::sort(sorted.begin(), sorted.end());
    int64_t covered = 0;
    for (const auto& [offset, count] : sorted) {
      EXPECT_EQ(offset, covered) << "the blocks tile the gradient";
      covered = offset + count;
    }
    EXPECT_EQ(covered, n);
    for (const Precision precision : {Precision::f32, Precision::bf16}) {
      const std::string what = "d_model " + std::to_string(c.d_model) + ", " + precision_name(precision);
      std::vector<float> whole(static_cast<size_t>(n));
      const float loss = train::FastStep(c, precision, "")
                             .loss_and_gradient(*pool, 2, rope, params, ids.data(), c.batch, whole.data());
      for (int threads = 1; threads <= 2; ++threads) {
        std::vector<float> grad(static_cast<size_t>(n), 5.0f);
        float carried = 0.0f;
        for (int r = 0; r < 3; ++r) {
          const auto [b0, b1] = train::rank_rows(c.batch, r, 3);
          std::vector<size_t> received, sent;
          train::FastStep::BatchPart part;
          part.count = c.batch * c.length;
          part.continued = r > 0;
          part.receive = [&](size_t i) {
            received.push_back(i);
            if (i == blocks) part.total = carried;
          };
          part.send = [&](size_t i) { sent.push_back(i); };
          train::FastStep step(c, precision, "");
          carried = step.loss_and_gradient(*pool, threads, rope, params, ids.data() + b0 * (c.length + 1), b1 - b0,
                                           grad.data(), &part);
          std::vector<size_t> want_received, want_sent;
          for (size_t i = 0; i < blocks; ++i) want_sent.push_back(i);
          if (r > 0) {
            want_received = want_sent;
            want_received.push_back(blocks);
          }
          EXPECT_EQ(received, want_received) << what << ", rank " << r;
          EXPECT_EQ(sent, want_sent) << what << ", rank " << r;
        }
        EXPECT_TRUE(test::same_bits(whole, grad)) << what << ", " << threads << " threads";
        EXPECT_EQ(std::bit_cast<uint32_t>(loss),
                  std::bit_cast<uint32_t>(carried / static_cast<float>(c.batch * c.length)))
            << what;
      }
    }
  }
}

TEST(RankRows, ContiguousBlocksInRankOrder) {
  EXPECT_EQ(train::rank_rows(5, 0, 2), (std::pair<int64_t, int64_t>{0, 3}));
  EXPECT_EQ(train::rank_rows(5, 1, 2), (std::pair<int64_t, int64_t>{3, 5}));
  EXPECT_EQ(train::rank_rows(2, 3, 4), (std::pair<int64_t, int64_t>{2, 2}));
}

// ---- the command under mpirun ----

std::string mpirun() {
  for (const char* path : {"/usr/bin/mpirun", "/usr/local/bin/mpirun"})
    if (::access(path, X_OK) == 0) return path;
  return "";
}

#define SKIP_WITHOUT_MPI()                                                                         \
  do {                                                                                             \
    if (!train::mpi_built()) GTEST_SKIP() << "this build has no MPI (LOCKSTEP_MPI off)";             \
    if (mpirun().empty()) GTEST_SKIP() << "mpirun is missing (Debian: apt-get install openmpi-bin)"; \
  } while (0)

// mpirun with every byte on loopback, as root if need be, more ranks than cores allowed; a job
// that hangs is ended after 60 s.
std::vector<std::string> launch(int ranks, const std::vector<std::string>& command) {
  std::vector<std::string> argv = {"/usr/bin/timeout", "-k", "5", "60", mpirun(), "--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader",
                                   "--mca", "oob_tcp_if_include", "lo", "-np", std::to_string(ranks)};
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

std::vector<std::string> train(const std::string& run, const std::string& dir, const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv = {LOCKSTEP_BINARY, "train", run, "--checkpoint-dir", dir, "--cpu-cores", "1"};
  argv.insert(argv.end(), more.begin(), more.end());
  return argv;
}

// A run of 2 layers over a batch of 5, so that 2, 3 and 4 ranks split it unevenly.
const test::RunKeys kKeys = {{":batch", "5"}, {":n-layers", "2"}, {":steps", "6"}, {":checkpoint-every", "2"}};

// SHA-256 of every checkpoint file, by name (metrics.jsonl holds timings and is left out).
std::map<std::string, std::string> hashes(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& [name, bytes] : test::checkpoint_files(dir)) out[name] = sha256_hex(bytes.data(), bytes.size());
  return out;
}

// `--resume` with 2 ranks after a job that was stopped or killed: mpirun may return while its
// ranks are still ending and hold the directory's lock, so a refusal naming the lock is retried
// for up to 30 s; any other result is returned at once.
test::CommandResult resume_once_unlocked(const std::string& run, const std::string& ck) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    test::CommandResult r = test::run_command(launch(2, train(run, ck, {"--resume"})));
    if (r.err.find("another training run is writing to") == std::string::npos ||
        std::chrono::steady_clock::now() > deadline)
      return r;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void expect_ok(const test::CommandResult& r, const std::string& what) {
  ASSERT_EQ(r.status, 0) << what << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err;
}

TEST(MpiTrain, SameCheckpointsAtOneToFourRanksAndWithoutMpi) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(dir, kKeys);
  expect_ok(test::run_command(train(run, dir / "plain")), "the run without mpirun");
  const auto want = hashes(dir / "plain");
  ASSERT_EQ(want.count("step-00000006/model.json"), 1u);
  const auto want_losses = test::metrics_loss_bits(dir / "plain/metrics.jsonl");
  for (int ranks = 1; ranks <= 4; ++ranks) {
    const std::string ck = dir / ("np" + std::to_string(ranks));
    const auto r = test::run_command(launch(ranks, train(run, ck)));
    expect_ok(r, std::to_string(ranks) + " ranks");
    EXPECT_EQ(hashes(ck), want) << ranks << " ranks";
    EXPECT_EQ(test::metrics_loss_bits(ck + "/metrics.jsonl"), want_losses) << ranks << " ranks";
    // Progress and the summary come once, from rank 0.
    size_t done = 0;
    for (size_t at = r.out.find("train: done"); at != std::string::npos; at = r.out.find("train: done", at + 1)) ++done;
    EXPECT_EQ(done, 1u) << r.out;
  }
}

// Widths whose fused gradients' parts are whole panels (panel_aligned_config): the ranks send
// gate, up, q, k and v part by part as their chains end.
TEST(MpiTrain, PanelAlignedWidthsGiveTheSameCheckpointsAtTwoAndThreeRanks) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(
      dir, {{":batch", "5"}, {":n-layers", "2"}, {":d-model", "64"}, {":n-heads", "4"}, {":n-kv-heads", "2"},
            {":d-ff", "96"}, {":steps", "3"}, {":checkpoint-every", "1"}});
  expect_ok(test::run_command(train(run, dir / "plain")), "the run without mpirun");
  const auto want = hashes(dir / "plain");
  ASSERT_EQ(want.count("step-00000003/model.json"), 1u);
  for (int ranks = 2; ranks <= 3; ++ranks) {
    const std::string ck = dir / ("np" + std::to_string(ranks));
    expect_ok(test::run_command(launch(ranks, train(run, ck))), std::to_string(ranks) + " ranks");
    EXPECT_EQ(hashes(ck), want) << ranks << " ranks";
  }
}

// More ranks than rows: rank 2 of 3 has none and passes the chains, the final gradient's ring and
// the optimizer's slices on as they come.
TEST(MpiTrain, ARankWithoutRowsPassesEverythingOnWithTheSameBits) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(dir, {{":batch", "2"}, {":steps", "3"}, {":checkpoint-every", "1"}});
  expect_ok(test::run_command(train(run, dir / "plain")), "the run without mpirun");
  const auto want = hashes(dir / "plain");
  ASSERT_EQ(want.count("step-00000003/model.json"), 1u);
  expect_ok(test::run_command(launch(3, train(run, dir / "np3"))), "3 ranks over 2 rows");
  EXPECT_EQ(hashes(dir / "np3"), want);
}

// LOCKSTEP_PHASE_TIMES=1 (bench/mpi_scaling.sh): every rank prints one line of phase times on
// stderr and the bits stay the same; without it no such line.
TEST(MpiTrain, PhaseTimesPrintALinePerRankAndKeepTheBits) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(dir, {{":batch", "3"}, {":steps", "2"}, {":checkpoint-every", "1"}});
  const auto plain = test::run_command(train(run, dir / "plain"));
  expect_ok(plain, "the run without mpirun");
  EXPECT_EQ(plain.err.find("phase seconds"), std::string::npos) << plain.err;
  std::vector<std::string> argv = {"/usr/bin/env", "LOCKSTEP_PHASE_TIMES=1"};
  std::vector<std::string> job = launch(2, train(run, dir / "np2"));
  job.insert(job.begin() + 5, {"-x", "LOCKSTEP_PHASE_TIMES"});  // after timeout -k 5 60 mpirun
  argv.insert(argv.end(), job.begin(), job.end());
  const auto r = test::run_command(argv);
  expect_ok(r, "2 ranks with phase times");
  for (const char* rank : {"rank 0 of 2 phase seconds", "rank 1 of 2 phase seconds"}) {
    const size_t at = r.err.find(rank);
    ASSERT_NE(at, std::string::npos) << r.err;
    for (const char* phase : {" forward ", " weight_chains ", " receive ", " optimizer ", " total "})
      EXPECT_NE(r.err.find(phase, at), std::string::npos) << phase << " in " << r.err;
  }
  EXPECT_EQ(r.out.find("phase seconds"), std::string::npos) << "kept off stdout";
  EXPECT_EQ(hashes(dir / "np2"), hashes(dir / "plain"));
}

TEST(MpiTrain, StartedWithTwoRanksAndResumedWithThreeEqualsTheUninterruptedRun) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(dir, kKeys);
  expect_ok(test::run_command(train(run, dir / "plain")), "the run without mpirun");
  expect_ok(test::run_command(launch(2, train(run, dir / "ck", {"--steps", "4"}))), "2 ranks to step 4");
  expect_ok(test::run_command(launch(3, train(run, dir / "ck", {"--resume"}))), "3 ranks resumed");
  EXPECT_EQ(hashes(dir / "ck"), hashes(dir / "plain"));
}

TEST(MpiTrain, RankKilledMidRunLeavesTheLastCompleteCheckpointAndAResumeFinishesWithTheSameBits) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const test::RunKeys keys = {{":batch", "5"}, {":steps", "400"}, {":checkpoint-every", "5"}, {":keep", "0"}};
  const std::string run = test::write_tiny_run(dir, keys);
  expect_ok(test::run_command(train(run, dir / "plain")), "the run without mpirun");
  // Each rank records its pid, so that the test can kill rank 2 alone.
  const std::string ck = dir / "ck";
  std::string command = "echo $$ > " + (dir / "pid.") + "$OMPI_COMM_WORLD_RANK; exec";
  for (const std::string& a : train(run, ck)) command += " '" + a + "'";
  const pid_t job = test::spawn(launch(3, {"/bin/sh", "-c", command}));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (::access((ck + "/step-00000010").c_str(), F_OK) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::string pid_text = test::read_file(dir / "pid.2");
  ASSERT_FALSE(pid_text.empty());
  ASSERT_EQ(::kill(static_cast<pid_t>(std::stol(pid_text)), SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the job ended as if nothing happened";
  ASSERT_EQ(::access((ck + "/step-00000400").c_str(), F_OK), -1) << "the run finished before the kill";
  // Every checkpoint left is complete and equals the uninterrupted run's of its step.
  const auto plain = hashes(dir / "plain");
  const auto left = hashes(ck);
  ASSERT_FALSE(left.empty());
  for (const auto& [name, hash] : left) {
    if (name.rfind("step-", 0) != 0) continue;
    ASSERT_EQ(plain.count(name), 1u) << name;
    EXPECT_EQ(hash, plain.at(name)) << name;
  }
  expect_ok(resume_once_unlocked(run, ck), "2 ranks resumed after the kill");
  EXPECT_EQ(hashes(ck), plain);
}

// Ctrl-C at the terminal: mpirun passes the stop to every rank (Open MPI sends them SIGTERM);
// rank 0's request is broadcast, so all ranks end after the same step; whatever checkpoints are
// left are whole, and a resume finishes with the uninterrupted run's bits.
TEST(MpiTrain, SigintToMpirunEndsTheJobAndAResumeFinishesWithTheSameBits) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const test::RunKeys keys = {{":batch", "5"}, {":steps", "1000"}, {":checkpoint-every", "100"}, {":keep", "0"}};
  const std::string run = test::write_tiny_run(dir, keys);
  expect_ok(test::run_command(train(run, dir / "plain")), "the run without mpirun");
  const std::string ck = dir / "ck";
  const pid_t job = test::spawn(launch(2, train(run, ck)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  // In its loop once metrics.jsonl holds a line.
  while (test::read_file(ck + "/metrics.jsonl").find('\n') == std::string::npos &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // `timeout` runs mpirun in the foreground of its own group; the signal goes to mpirun alone.
  ASSERT_EQ(::kill(job, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(job, &status, 0), job);
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_NE(WEXITSTATUS(status), 0) << "a stopped run must not look finished";
  EXPECT_NE(WEXITSTATUS(status), 124) << "the job did not stop within 60 s";
  ASSERT_EQ(::access((ck + "/step-00001000").c_str(), F_OK), -1) << "the run finished before the signal";
  const auto plain = hashes(dir / "plain");
  const auto left = hashes(ck);
  // The checkpoints of the schedule equal the plain run's; the stop may add one at its step
  // (when mpirun lets the ranks finish it: Open MPI ends them shortly after passing the stop on).
  std::string stop_step;
  for (const auto& [name, hash] : left) {
    if (name.rfind("step-", 0) != 0) continue;
    if (plain.count(name)) EXPECT_EQ(hash, plain.at(name)) << name;
    else if (name.substr(name.find('/')) == "/model.json") stop_step = name.substr(0, name.find('/') + 1);
  }
  expect_ok(resume_once_unlocked(run, ck), "2 ranks resumed after SIGINT");
  auto resumed = hashes(ck);
  if (!stop_step.empty())
    std::erase_if(resumed, [&](const auto& entry) { return entry.first.rfind(stop_step, 0) == 0; });
  EXPECT_EQ(resumed, plain);
}

TEST(MpiTrain, RanksThatDisagreeRefuseToStartSayingWhich) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(dir, kKeys);
  test::write_file(dir / "run1.sx", test::read_file(run) + "; rank 1's copy differs in a comment\n");
  test::write_file(dir / "run0.sx", test::read_file(run));
  test::write_file(dir / "run2.sx", test::read_file(run));
  std::string command = "exec";
  for (const std::string& a : train(dir / "run$OMPI_COMM_WORLD_RANK.sx", dir / "ck"))
    command += a.find('$') != std::string::npos ? " \"" + a + "\"" : " '" + a + "'";
  const auto r = test::run_command(launch(3, {"/bin/sh", "-c", command}));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("rank 1's run file differs from rank 0's"), std::string::npos) << r.err;
  EXPECT_EQ(::access((dir / "ck/step-00000002").c_str(), F_OK), -1);
}

// A rank that fails on its own (here its run file names data that is missing) ends the whole
// job non-zero, naming its rank and the reason; nothing is written.
TEST(MpiTrain, ARankThatFailsEndsTheJobNamingItsRank) {
  SKIP_WITHOUT_MPI();
  TempDir dir;
  const std::string run = test::write_tiny_run(dir, kKeys);
  test::write_file(dir / "run0.sx", test::read_file(run));
  test::write_file(dir / "run2.sx", test::read_file(run));
  test::write_file(dir / "run1.sx", test::tiny_run_text(dir / "missing.txt", kKeys));
  std::string command = "exec";
  for (const std::string& a : train(dir / "run$OMPI_COMM_WORLD_RANK.sx", dir / "ck"))
    command += a.find('$') != std::string::npos ? " \"" + a + "\"" : " '" + a + "'";
  const auto r = test::run_command(launch(3, {"/bin/sh", "-c", command}));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("lockstep train: rank 1 of 3: data file"), std::string::npos) << r.err;
  EXPECT_EQ(::access((dir / "ck/step-00000002").c_str(), F_OK), -1);
}

}  // namespace
}  // namespace lockstep
