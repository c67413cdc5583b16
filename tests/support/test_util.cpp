#include "support/test_util.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "core/rng.hpp"
#include "core/sha256.hpp"
#include "format/atomic_write.hpp"

namespace lockstep::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/lockstep-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() { format::remove_tree(path_); }

ModelConfig tiny_config(int32_t length) {
  ModelConfig c;
  c.vocab_size = 256;
  c.length = length;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_ff = 40;
  c.batch = 3;
  return c;
}

ModelConfig tiny_gqa_config(int32_t length) {
  ModelConfig c = tiny_config(length);
  c.d_model = 24;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 36;
  return c;
}

std::vector<int32_t> random_ids(int64_t count, int32_t vocab, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    ids[static_cast<size_t>(i)] = static_cast<int32_t>(random_below(static_cast<uint64_t>(vocab), seed, 77, static_cast<uint64_t>(i)));
  return ids;
}

std::vector<float> random_floats(int64_t count, uint64_t seed, double scale) {
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(scale * random_normal(seed, 78, static_cast<uint64_t>(i)));
  return v;
}

std::string sha256_of(std::span<const float> values) { return sha256_f32_le(values); }

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

void expect_same(std::span<const float> got, std::span<const float> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  if (std::memcmp(got.data(), want.data(), got.size_bytes()) == 0) return;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
      FAIL() << what << ": first difference at " << i << ": " << got[i] << " (0x" << std::hex
             << std::bit_cast<uint32_t>(got[i]) << ") vs reference " << want[i] << " (0x"
             << std::bit_cast<uint32_t>(want[i]) << ")";
}

CommandResult run_command(const std::vector<std::string>& argv, const std::string& input) {
  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) || ::pipe2(out_pipe, O_CLOEXEC) || ::pipe2(err_pipe, O_CLOEXEC))
    throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ::fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
  CommandResult r;
  size_t written = 0;
  bool in_open = true, out_open = true, err_open = true;
  if (input.empty()) {
    ::close(in_pipe[1]);
    in_open = false;
  }
  while (out_open || err_open) {
    pollfd fds[3];
    int nfds = 0;
    if (out_open) fds[nfds++] = {out_pipe[0], POLLIN, 0};
    if (err_open) fds[nfds++] = {err_pipe[0], POLLIN, 0};
    if (in_open) fds[nfds++] = {in_pipe[1], POLLOUT, 0};
    ::poll(fds, static_cast<nfds_t>(nfds), -1);
    for (int i = 0; i < nfds; ++i) {
      if (!fds[i].revents) continue;
      if (fds[i].fd == in_pipe[1]) {
        const ssize_t n = ::write(in_pipe[1], input.data() + written, input.size() - written);
        if (n > 0) written += static_cast<size_t>(n);
        if (n < 0 || written == input.size()) {
          ::close(in_pipe[1]);
          in_open = false;
        }
        continue;
      }
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        ::close(fds[i].fd);
        (fds[i].fd == out_pipe[0] ? out_open : err_open) = false;
      } else {
        (fds[i].fd == out_pipe[0] ? r.out : r.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  if (in_open) ::close(in_pipe[1]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::vector<std::string> targets_under_test() {
  const std::vector<std::string> all = simd_targets();
  const char* env = std::getenv("LOCKSTEP_TEST_TARGETS");
  if (env == nullptr || *env == '\0') return all;
  std::vector<std::string> wanted;
  std::stringstream list(env);
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    bool known = false;
    for (const std::string& t : all) known = known || t == name;
    if (!known) {
      std::string have;
      for (const std::string& t : all) have += (have.empty() ? "" : ", ") + t;
      throw std::runtime_error("LOCKSTEP_TEST_TARGETS names " + name + ", which this machine does not run (it runs " +
                               have + ")");
    }
    wanted.push_back(name);
  }
  std::vector<std::string> out, left;
  for (const std::string& t : all) {
    bool in = false;
    for (const std::string& w : wanted) in = in || w == t;
    (in ? out : left).push_back(t);
  }
  static bool said = false;  // once per process
  if (!said && !left.empty()) {
    std::string names;
    for (const std::string& t : left) names += (names.empty() ? "" : ", ") + t;
    std::printf("LOCKSTEP_TEST_TARGETS=%s: not checking %s in this run\n", env, names.c_str());
    said = true;
  }
  return out;
}

bool target_under_test(const std::string& name) {
  for (const std::string& t : targets_under_test())
    if (t == name) return true;
  return false;
}

}  // namespace lockstep::test
