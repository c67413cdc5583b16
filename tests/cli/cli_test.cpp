// The lockstep command end to end: init, inspect and call, their outputs and their refusals.
#include <gtest/gtest.h>

#include <cstring>

#include "kernels/cuda/device.hpp"
#include "lockstep/call.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

std::string init_tiny(const test::TempDir& dir, const std::string& name = "m") {
  const auto r = test::run_command({kBin, "init", "--seed", "5", "--d-model", "16", "--n-layers", "2",
                                    "--n-heads", "4", "--n-kv-heads", "2", "--d-ff", "24", "--length", "12",
                                    "-o", dir / name});
  EXPECT_EQ(r.status, 0) << r.err;
  return dir / name;
}

std::string bytes_of(const std::vector<int32_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(Cli, InitWritesAModelThatInspectDescribes) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  const auto r = test::run_command({kBin, "inspect", m});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* want : {"profile    lockstep-f32-1", "n_kv_heads 2", "inputs  inputs [1, 12] i32",
                           "outputs logits [1, 12, 256] f32", "hidden [1, 12, 16] f32", "sha256     ",
                           "precision  f32", "tokenizer  bytes"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  const auto model = Model::load(m);
  EXPECT_NE(r.out.find(model->parameters_sha256()), std::string::npos);
  // init refuses to overwrite
  const auto again = test::run_command({kBin, "init", "--seed", "1", "-o", m});
  EXPECT_NE(again.status, 0);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
}

// bench prints each figure with the forward pass's shape; --prefill sets its positions and is
// refused outside the window, naming it.
TEST(Cli, BenchTakesThePrefillLengthAndRefusesOneOutsideTheWindow) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  const auto r = test::run_command({kBin, "bench", m, "--threads", "1", "--seconds", "0", "--decode-tokens", "3",
                                    "--prefill", "5"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* want : {"forward passes of 1 x 5 positions", "forward, cpu   1 thread", "decode, cpu   1 thread",
                           "(1-token session loop)"})  // an 11-token prompt in a window of 12
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  for (const char* bad : {"13", "-1"}) {
    const auto refused = test::run_command({kBin, "bench", m, "--prefill", bad});
    EXPECT_EQ(refused.status, 1) << bad;
    EXPECT_NE(refused.err.find("--prefill must be in [1, 12]"), std::string::npos) << refused.err;
  }
  // --simd times the target named (each target the CPU runs), and the header says which.
  for (const std::string& target : simd_targets()) {
    const auto t = test::run_command({kBin, "bench", m, "--threads", "1", "--seconds", "0", "--decode-tokens", "1",
                                      "--prefill", "2", "--simd", target});
    ASSERT_EQ(t.status, 0) << target << t.err;
    EXPECT_NE(t.out.find("SIMD target " + target + "\n"), std::string::npos) << t.out;
  }
  EXPECT_NE(r.out.find("SIMD target " + simd_targets().front() + "\n"), std::string::npos) << r.out;
}

TEST(Cli, CallWritesTheRawOutputsOfTheModel) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  const auto model = Model::load(m);
  const auto ids = test::random_ids(12, 256, 3);
  const auto logits = model->logits({ids.data(), 1, 12});
  const auto hidden = model->hidden({ids.data(), 1, 12});
  for (const char* device : {"cpu", "reference"}) {
    const auto r = test::run_command({kBin, "call", m, "--device", device}, bytes_of(ids));
    ASSERT_EQ(r.status, 0) << r.err;
    ASSERT_EQ(r.out.size(), (logits.size() + hidden.size()) * 4);
    EXPECT_EQ(std::memcmp(r.out.data(), logits.data(), logits.size() * 4), 0) << device;
    EXPECT_EQ(std::memcmp(r.out.data() + logits.size() * 4, hidden.data(), hidden.size() * 4), 0) << device;
  }
  // --output in the order given, --at one position.
  auto with_at = ids;
  with_at.push_back(4);
  const auto r = test::run_command({kBin, "call", m, "--output", "hidden", "--output", "logits", "--at"}, bytes_of(with_at));
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.out.size(), (16 + 256) * 4u);
  EXPECT_EQ(std::memcmp(r.out.data(), hidden.data() + 4 * 16, 16 * 4), 0);
  EXPECT_EQ(std::memcmp(r.out.data() + 16 * 4, logits.data() + 4 * 256, 256 * 4), 0);
  // A model path after --output is the model, not a second output name.
  EXPECT_EQ(test::run_command({kBin, "call", "--output", "logits", m}, bytes_of(ids)).status, 0);
  // With --at, positions after `at` are not read: garbage there is fine.
  with_at[10] = 9999;
  EXPECT_EQ(test::run_command({kBin, "call", m, "--at", "--output", "logits"}, bytes_of(with_at)).status, 0);
}

TEST(Cli, CallRefusesBadInputWithAClearError) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  auto ids = test::random_ids(12, 256, 3);
  auto r = test::run_command({kBin, "call", m}, bytes_of(ids).substr(0, 20));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("standard input holds 20 bytes; a call takes 48 (inputs [1, 12] i32)"), std::string::npos) << r.err;
  ids[7] = 300;
  r = test::run_command({kBin, "call", m}, bytes_of(ids));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("got 300 at position 7"), std::string::npos) << r.err;
  ids[7] = 1;
  ids.push_back(12);
  r = test::run_command({kBin, "call", m, "--at"}, bytes_of(ids));
  EXPECT_NE(r.err.find("at = 12 is outside the window [0, 12)"), std::string::npos) << r.err;
  r = test::run_command({kBin, "call", m, "--output", "probs"}, "");
  EXPECT_NE(r.err.find("unknown output 'probs'; the model's outputs are logits, hidden"), std::string::npos) << r.err;
  r = test::run_command({kBin, "call", m, "--device", "cuda"}, "");
  // Refused in one line: not built in, or no GPU here (tests/cuda/refusal_test.cpp); with a GPU,
  // the empty input is.
  const char* cuda_refusal = !cuda::compiled_in()                 ? "device 'cuda' is not built into this lockstep"
                             : cuda::gpu_unavailable().empty() ? "standard input holds 0 bytes"
                                                               : "device 'cuda': no usable NVIDIA GPU";
  EXPECT_NE(r.err.find(cuda_refusal), std::string::npos) << r.err;
  r = test::run_command({kBin, "call", m, "--cpu-cores", "0"}, "");
  EXPECT_NE(r.status, 0);
  r = test::run_command({kBin, "call", dir / "nothing-here"}, "");
  EXPECT_NE(r.err.find("no such file or directory"), std::string::npos) << r.err;
  r = test::run_command({kBin, "call", m, "--trained"}, "");
  EXPECT_NE(r.err.find("is a model directory, not a checkpoint"), std::string::npos) << r.err;
}

TEST(Cli, EnvironmentChoosesTheDeviceAndCores) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  const auto ids = test::random_ids(12, 256, 8);
  const auto plain = test::run_command({kBin, "call", m}, bytes_of(ids));
  for (const char* env : {"LOCKSTEP_DEVICE=reference", "LOCKSTEP_CPU_CORES=3"}) {
    const auto r = test::run_command({"env", env, kBin, "call", m}, bytes_of(ids));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, plain.out) << env;
  }
  const auto bad = test::run_command({"env", "LOCKSTEP_DEVICE=metal", kBin, "call", m}, bytes_of(ids));
  EXPECT_NE(bad.err.find("device 'metal' is not built into this lockstep"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace lockstep
