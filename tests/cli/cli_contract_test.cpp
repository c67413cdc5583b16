// The command line's own contract: every refusal, CLI11's parse errors included, is one line
// "lockstep[ COMMAND]: error: ..." on standard error and status 1; help and the version exit 0;
// counts and seeds out of range are refused, not wrapped or taken as "unset".
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

bool has(const std::string& text, const std::string& want) { return text.find(want) != std::string::npos; }

test::CommandResult lockstep(std::vector<std::string> args, const std::string& input = "") {
  args.insert(args.begin(), kBin);
  return test::run_command(args, input);
}

// `args` fail with status 1 and one line that starts with `prefix` and holds `says`.
void refused(const std::vector<std::string>& args, const std::string& prefix, const std::string& says) {
  std::string shown;
  for (const auto& a : args) shown += " " + a;
  const auto r = lockstep(args);
  EXPECT_EQ(r.status, 1) << shown << "\n" << r.err;
  EXPECT_EQ(r.err.rfind(prefix + ": error: ", 0), 0u) << shown << "\n" << r.err;
  EXPECT_TRUE(has(r.err, says)) << shown << "\n" << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << shown << ": one line\n" << r.err;
  EXPECT_EQ(r.out, "") << shown;
}

std::string tiny_model(const test::TempDir& dir) {
  const auto r = lockstep({"init", "--seed", "5", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--d-ff",
                           "24", "--length", "8", "-o", dir / "m"});
  EXPECT_EQ(r.status, 0) << r.err;
  return dir / "m";
}

TEST(CliContract, ParseErrorsCarryThePrefixAndExitOne) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  refused({}, "lockstep", "a command is required: init, inspect, call, serve, train, eval, generate");
  refused({"-v"}, "lockstep", "unknown option '-v'");
  refused({"--bogus"}, "lockstep", "unknown option '--bogus'");
  refused({"trian"}, "lockstep", "unknown command 'trian'");
  refused({"inspect", m, "--bogus"}, "lockstep inspect", "--bogus");
  refused({"inspect", m, "extra"}, "lockstep inspect", "extra");
  refused({"generate", m, "--prompt", "x", "-n", "99999999999"}, "lockstep generate", "--tokens");
  refused({"init", "-o", dir / "x"}, "lockstep init", "--seed is required");
  refused({"init", "--seed", "1", "-o", dir / "x", "--length", "abc"}, "lockstep init", "--length");
  refused({"train", "run.sx"}, "lockstep train", "--checkpoint-dir is required");
  for (const std::vector<std::string>& help :
       std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"train", "--help"}, {"eval", "-h"}, {"--version"}}) {
    const auto r = lockstep(help);
    EXPECT_EQ(r.status, 0) << help[0] << r.err;
    EXPECT_FALSE(r.out.empty());
    EXPECT_EQ(r.err, "");
  }
}

TEST(CliContract, CpuCoresMustBePositive) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  for (const char* bad : {"0", "1025", "99999999999", "99999999999999999999999"})
    refused({"call", m, "--cpu-cores", bad}, "lockstep call",
            std::string("--cpu-cores must be in [1, 1024], got ") + bad);
  for (const char* bad : {"-1", "abc", "2x", "1.5"})
    refused({"call", m, "--cpu-cores", bad}, "lockstep call",
            std::string("--cpu-cores must be an integer in [1, 1024], got '") + bad + "'");
  const auto env = test::run_command({"env", "LOCKSTEP_CPU_CORES=0", kBin, "eval", m, "--data", dir / "m/model.json"});
  EXPECT_EQ(env.status, 1);
  EXPECT_TRUE(has(env.err, "lockstep eval: error: --cpu-cores must be in [1, 1024], got 0")) << env.err;
  EXPECT_EQ(test::run_command({"env", "LOCKSTEP_CPU_CORES=1", kBin, "eval", m, "--data", dir / "m/model.json"}).status, 0);
}

// --simd names a target this CPU runs (the message lists them), for --device cpu only; the
// variable LOCKSTEP_SIMD is the same flag.
TEST(CliContract, SimdMustNameATargetThisCpuRuns) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  std::string runs;
  for (const std::string& t : simd_targets()) runs += (runs.empty() ? "" : ", ") + t;
  for (const char* bad : {"AVX9", "avx2"})
    for (const char* command : {"call", "eval", "bench"}) {
      std::vector<std::string> args = {command, m, "--simd", bad};
      if (std::string(command) == "eval") args.insert(args.end(), {"--data", dir / "m/model.json"});
      refused(args, std::string("lockstep ") + command,
              "--simd: '" + std::string(bad) + "' is not a SIMD target this CPU runs; it runs " + runs);
    }
  refused({"generate", m, "--prompt", "a", "--device", "reference", "--simd", "portable"}, "lockstep generate",
          "--simd chooses the kernels of --device cpu, not of --device reference");
  const auto env = test::run_command({"env", "LOCKSTEP_SIMD=AVX9", kBin, "eval", m, "--data", dir / "m/model.json"});
  EXPECT_EQ(env.status, 1);
  EXPECT_TRUE(has(env.err, "lockstep eval: error: --simd: 'AVX9' is not a SIMD target")) << env.err;
  EXPECT_EQ(test::run_command({"env", "LOCKSTEP_SIMD=portable", kBin, "eval", m, "--data", dir / "m/model.json"}).status,
            0);
}

TEST(CliContract, SeedsOutOfRangeAreRefusedNotWrapped) {
  test::TempDir dir;
  const std::string m = tiny_model(dir);
  for (const char* bad : {"-1", "18446744073709551616", "99999999999999999999999", "1.5", "0x10", ""}) {
    refused({"init", "--seed", bad, "-o", dir / "s"}, "lockstep init",
            std::string("--seed: must be an integer in [0, 18446744073709551615] (2^64 - 1), got '") + bad + "'");
    refused({"generate", m, "--prompt", "a", "-n", "1", "--seed", bad}, "lockstep generate", "--seed: must be an integer in [0, 18446744073709551615]");
  }
  // The largest seed is a seed like any other.
  EXPECT_EQ(lockstep({"init", "--seed", "18446744073709551615", "--length", "8", "--d-model", "16", "--n-layers", "1",
                      "--n-heads", "2", "--d-ff", "24", "-o", dir / "s"})
                .status,
            0);
  EXPECT_EQ(lockstep({"generate", m, "--prompt", "a", "-n", "1", "--seed", "18446744073709551615", "--temperature", "1"})
                .status,
            0);
}

TEST(CliContract, InitCreatesMissingParentFolders) {
  test::TempDir dir;
  const auto r = lockstep({"init", "--seed", "1", "--length", "8", "--d-model", "16", "--n-layers", "1", "--n-heads",
                           "2", "--d-ff", "24", "-o", dir / "a/b/c/model"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(lockstep({"inspect", dir / "a/b/c/model"}).status, 0);
  // A parent that is a file: says which.
  test::write_file(dir / "file", "x");
  refused({"init", "--seed", "1", "-o", dir / "file/sub/model"}, "lockstep init",
          "cannot create the parent folder '" + dir / "file/sub" + "'");
}

}  // namespace
}  // namespace lockstep
