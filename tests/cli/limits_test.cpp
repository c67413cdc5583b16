// The command's limits (docs/LIMITS.md): inspect and call refuse a model.json that claims more
// than its weights file holds without taking the claimed memory, init says how many bytes an
// absurd size would need instead of "out of memory", and a FIFO in a model directory is refused
// at once instead of hanging the command.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "format/atomic_write.hpp"
#include "format/model_json.hpp"
#include "lockstep/config.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::string init_tiny(const test::TempDir& dir) {
  const auto r = test::run_command({kBin, "init", "--seed", "5", "--d-model", "16", "--n-layers", "2",
                                    "--n-heads", "2", "--d-ff", "24", "--length", "12", "-o", dir / "m"});
  EXPECT_EQ(r.status, 0) << r.err;
  return dir / "m";
}

// Runs argv with stdout to /dev/null and stderr to `err_path`; the exit status (128 + signal
// when killed) and the child's peak resident memory in MiB.
struct Measured {
  int status = -1;
  long peak_mib = 0;
};
Measured run_measured(const std::vector<std::string>& argv, const std::string& err_path) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = ::open("/dev/null", O_RDWR);
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(err, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  Measured m;
  int status = 0;
  rusage usage{};
  if (pid < 0 || ::wait4(pid, &status, 0, &usage) != pid) return m;
  m.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  m.peak_mib = usage.ru_maxrss / 1024;
  return m;
}

TEST(CliLimits, InspectRefusesAConfigurationLargerThanItsFileWithoutTakingItsMemory) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  // model.json rewritten for d_model 2048 (4 layers, d_ff 6144: 216 million parameters, 864 MB
  // as f32) beside the tiny model's weights file.
  const std::string json = m + "/model.json";
  format::ModelDescription d = format::parse_model_json(test::read_file(json), json);
  d.config.d_model = 2048;
  d.config.n_heads = 16;
  d.config.n_kv_heads = 16;
  d.config.d_ff = 6144;
  d.config.n_layers = 4;
  const int64_t need = d.config.parameter_count() * 4;
  ASSERT_GT(need, int64_t{800} << 20);
  test::write_file(json, format::render_model_json(d));
  for (const char* command : {"inspect", "call"}) {
    const Measured r = run_measured({"timeout", "60", kBin, command, m}, dir / "err.txt");
    const std::string err = test::read_file(dir / "err.txt");
    EXPECT_EQ(r.status, 1) << command << ": " << err;
    EXPECT_TRUE(has(err, std::string("lockstep ") + command + ": error: " + m + "/params.safetensors: parameter 'embed' has shape [256, 16], expected [256, 2048]"))
        << err;
    EXPECT_TRUE(has(err, "needs " + std::to_string(need) + " bytes of f32 tensor data here; the file holds "))
        << err;
    EXPECT_LT(r.peak_mib, 256) << command << " took " << r.peak_mib << " MiB before refusing";
  }
}

TEST(CliLimits, InitSaysHowManyBytesAnAbsurdSizeWouldNeed) {
  test::TempDir dir;
  // 2^20 x 65536 embeddings alone: 2^37 parameters, 512 GiB as f32.
  const auto r = test::run_command({kBin, "init", "--seed", "1", "--vocab-size", "1048576", "--d-model",
                                    "65536", "--n-heads", "64", "-o", dir / "big"});
  EXPECT_EQ(r.status, 1);
  EXPECT_FALSE(has(r.err, "out of memory")) << r.err;
  ModelConfig c;
  c.vocab_size = 1 << 20;
  c.d_model = 65536;
  c.n_heads = 64;
  c.n_kv_heads = 64;
  const int64_t n = c.parameter_count();
  EXPECT_TRUE(has(r.err, "lockstep init: error: model config: the model has " + std::to_string(n) +
                             " parameters, which need " + std::to_string(n * 4) + " bytes as f32, more than the " +
                             "2147483648 parameters (8589934592 bytes) lockstep builds, loads or trains"))
      << r.err;
  EXPECT_FALSE(format::path_exists(dir / "big"));
}

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(CliLimits, InitThatCannotAllocateSaysHowManyBytes) {
  // Within the cap but past what the process may map (RLIMIT_AS 256 MiB; 100 million
  // parameters need 400 MB): the bytes, not a bare "out of memory". Sanitizers reserve far more
  // address space than this limit, so sanitized builds skip it.
  test::TempDir dir;
  const std::string err_path = dir / "err.txt";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const rlimit limit = {size_t{256} << 20, size_t{256} << 20};
    ::setrlimit(RLIMIT_AS, &limit);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    ::execl(kBin.c_str(), kBin.c_str(), "init", "--seed", "1", "--vocab-size", "256", "--d-model", "4096",
            "--n-heads", "32", "--n-layers", "2", "--d-ff", "2048", "-o", (dir / "big").c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const std::string err = test::read_file(err_path);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  ModelConfig c;
  c.vocab_size = 256;
  c.d_model = 4096;
  c.n_heads = 32;
  c.n_kv_heads = 32;
  c.n_layers = 2;
  c.d_ff = 2048;
  const int64_t n = c.parameter_count();
  ASSERT_GT(n * 4, int64_t{300} << 20);
  EXPECT_TRUE(has(err, "lockstep init: error: the model has ")) << err;
  EXPECT_TRUE(has(err, " parameters, ")) << err;
  EXPECT_TRUE(has(err, "which this machine could not allocate (out of memory)")) << err;
  EXPECT_FALSE(format::path_exists(dir / "big"));
}
#endif

TEST(CliLimits, AFifoInAModelDirectoryIsRefusedAtOnce) {
  test::TempDir dir;
  const std::string m = init_tiny(dir);
  const std::string weights = m + "/params.safetensors";
  ASSERT_EQ(::unlink(weights.c_str()), 0);
  ASSERT_EQ(::mkfifo(weights.c_str(), 0644), 0);
  // `timeout` bounds the test: a reader that blocks on the FIFO is killed (status 124).
  for (const char* command : {"inspect", "call"}) {
    const auto r = test::run_command({"timeout", "20", kBin, command, m});
    EXPECT_EQ(r.status, 1) << command << " (124: it hung on the FIFO)\n" << r.err;
    EXPECT_TRUE(has(r.err, weights + ": not a regular file (it is a FIFO)")) << r.err;
  }
}

}  // namespace
}  // namespace lockstep
