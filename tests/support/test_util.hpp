// Shared helpers for the test binaries.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "lockstep/config.hpp"
#include "lockstep/model.hpp"

namespace lockstep::test {

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Small configurations used throughout: `tiny` (d 16, 2 layers) and `tiny_gqa` (n_kv_heads < n_heads).
ModelConfig tiny_config(int32_t length = 16);
ModelConfig tiny_gqa_config(int32_t length = 16);

// Uniform ids in [0, vocab) from lockstep's counter-based RNG.
std::vector<int32_t> random_ids(int64_t count, int32_t vocab, uint64_t seed);
// Floats ~ N(0, scale^2) from the same RNG.
std::vector<float> random_floats(int64_t count, uint64_t seed, double scale = 1.0);

std::string sha256_of(std::span<const float> values);
bool same_bits(std::span<const float> a, std::span<const float> b);
// Fails the current test (gtest's FAIL, returning from here) unless got and want hold the same
// bits; the message names `what` and the first differing element, both values and their bits.
void expect_same(std::span<const float> got, std::span<const float> want, const std::string& what);

struct CommandResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out, err;
};
// Runs argv (no shell), feeding `input` on stdin.
CommandResult run_command(const std::vector<std::string>& argv, const std::string& input = "");

// The SIMD targets a test checks: every target this machine runs (simd_targets(), best first), or,
// when LOCKSTEP_TEST_TARGETS names some (comma-separated, e.g. "SVE2_128,SVE"), those alone, in
// the same order. The Arm stage runs the SVE lengths on a subset this way (README, "Running on
// Arm"). A name this machine does not run throws (a run meant for SVE2_128 never passes by
// checking nothing), and a run that leaves targets out prints which, so nothing is skipped
// silently.
std::vector<std::string> targets_under_test();
bool target_under_test(const std::string& name);

std::string read_file(const std::string& path);
void write_file(const std::string& path, const std::string& bytes);

}  // namespace lockstep::test
