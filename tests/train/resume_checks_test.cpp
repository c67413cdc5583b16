// What resuming reads from outside and must not take on trust: every field of training.json is
// required (a misspelled one is refused as missing, not ignored), its ema_decay must be the run
// file's :ema, and the files a run reads (run file, data, training.json) are refused at once
// when they are not regular files (a FIFO would otherwise hang the command).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include <nlohmann/json.hpp>

#include "format/json_text.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

using nlohmann::ordered_json;

RunResult train(const std::string& run_file, const std::string& dir, std::optional<int64_t> steps = {},
                bool resume = false) {
  RunOptions o;
  o.steps = steps;
  o.resume = resume;
  o.threads = 1;
  return run_training(read_run_file(run_file), dir, o);
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(not refused)";
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class TrainingJson : public ::testing::Test {
 protected:
  void SetUp() override {
    run_ = test::write_tiny_run(dir_);
    train(run_, dir_ / "ck", 4);
    path_ = dir_ / "ck/step-00000004/training.json";
    original_ = test::read_file(path_);
  }
  // training.json with `edit` applied; resuming from it must be refused with every `parts`.
  void ExpectResumeRefused(const std::function<void(ordered_json&)>& edit, const std::vector<std::string>& parts,
                           const std::string& run = "") {
    ordered_json j = lockstep::format::parse_ordered_json(original_);
    edit(j);
    test::write_file(path_, j.dump(2) + "\n");
    const std::string m = refusal([&] { train(run.empty() ? run_ : run, dir_ / "ck", 8, true); });
    for (const std::string& p : parts) EXPECT_TRUE(has(m, p)) << p << "\n" << m;
    test::write_file(path_, original_);
  }
  // `key` renamed with its second letter replaced by '}' (as in `e}a_decay`).
  static void misspell(ordered_json& object, const std::string& key) {
    ASSERT_TRUE(object.contains(key)) << key;
    std::string wrong = key;
    wrong[1] = '}';
    object[wrong] = object[key];
    object.erase(key);
  }
  test::TempDir dir_;
  std::string run_, path_, original_;
};

TEST_F(TrainingJson, EveryFieldIsRequired) {
  // Untouched, it resumes.
  EXPECT_EQ(train(run_, dir_ / "ck", 4, true).last_step, 4);
  for (const char* key : {"format", "format_version", "slug", "step", "run_file", "optimizer", "ema_decay", "data"})
    ExpectResumeRefused([&](ordered_json& j) { misspell(j, key); },
                        {path_ + ": has no field '" + key + "'"});
  for (const char* key : {"file", "sha256"})
    ExpectResumeRefused([&](ordered_json& j) { misspell(j["run_file"], key); },
                        {path_ + ": has no field '" + key + "'"});
  for (const char* key : {"file", "m_sha256", "v_sha256"})
    ExpectResumeRefused([&](ordered_json& j) { misspell(j["optimizer"], key); },
                        {path_ + ": has no field '" + key + "'"});
}

TEST_F(TrainingJson, FieldsThatDisagreeWithTheCheckpointAreRefused) {
  ExpectResumeRefused([](ordered_json& j) { j["slug"] = "another"; },
                      {path_ + ": slug 'another' is not model.json's checkpoint slug"});
  ExpectResumeRefused([](ordered_json& j) { j["run_file"]["file"] = "other.sx"; },
                      {path_ + ": run_file.file is not 'run.sx'"});
  ExpectResumeRefused([](ordered_json& j) { j["optimizer"]["file"] = "m.safetensors"; },
                      {path_ + ": optimizer.file is not 'optimizer.safetensors'"});
  ExpectResumeRefused([](ordered_json& j) { j["ema_decay"] = nullptr; },
                      {path_ + ": ema_decay is null but model.json's weights are averaged"});
  ExpectResumeRefused([](ordered_json& j) { j["ema_decay"] = "0.9"; },
                      {path_ + ": field 'ema_decay' is neither null nor a number in (0, 1)"});
  ExpectResumeRefused([](ordered_json& j) { j["ema_decay"] = 1.5; },
                      {path_ + ": field 'ema_decay' is neither null nor a number in (0, 1)"});
}

TEST_F(TrainingJson, TheDecayIsComparedWithTheRunFiles) {
  // training.json records 0.9, as the run file says; a decay edited in the checkpoint is refused,
  // naming both values.
  EXPECT_TRUE(has(original_, "\"ema_decay\": 0.9")) << original_;
  ExpectResumeRefused([](ordered_json& j) { j["ema_decay"] = 0.5; },
                      {"cannot resume from " + dir_ / "ck/step-00000004" + " with " + run_ +
                       ": the checkpoint's averages were kept with :ema 0.5 (its training.json's ema_decay), "
                       "the run file says :ema 0.9"});
  // And so is a run file with another decay.
  test::write_file(dir_ / "other.sx", test::tiny_run_text(dir_ / "data.txt", {{":ema", "0.99"}}));
  ExpectResumeRefused([](ordered_json&) {},
                      {"the checkpoint's averages were kept with :ema 0.9 (its training.json's ema_decay), "
                       "the run file says :ema 0.99"},
                      dir_ / "other.sx");
  // The same decay resumes.
  EXPECT_EQ(train(run_, dir_ / "ck", 5, true).last_step, 5);
}

// Runs `f` in a child bounded by a 20 s alarm; expects an Error holding every one of `parts`.
void expect_refused_quickly(const std::function<void()>& f, const std::vector<std::string>& parts) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20);
    const std::string m = refusal(f);
    bool ok = true;
    for (const std::string& p : parts) ok = ok && has(m, p);
    if (!ok) std::fprintf(stderr, "refused with: %s\n", m.c_str());
    ::_exit(ok ? 0 : 4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status))
    ADD_FAILURE() << "the reader hung (killed by signal " << WTERMSIG(status) << ")";
  else
    EXPECT_EQ(WEXITSTATUS(status), 0) << "refused with another message, or not at all";
}

TEST(RunFiles, AFifoIsRefusedAtOnce) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  // The run file.
  const std::string fifo_run = dir / "fifo.sx";
  ASSERT_EQ(::mkfifo(fifo_run.c_str(), 0644), 0);
  expect_refused_quickly([&] { read_run_file(fifo_run); }, {fifo_run + ": not a regular file (it is a FIFO)"});
  // A data file.
  const std::string fifo_data = dir / "fifo.txt";
  ASSERT_EQ(::mkfifo(fifo_data.c_str(), 0644), 0);
  test::write_file(dir / "fifo_data.sx", test::tiny_run_text(fifo_data));
  expect_refused_quickly([&] { train(dir / "fifo_data.sx", dir / "x", 1); },
                         {"data file '" + fifo_data + "' is not a regular file"});
  // training.json on resume.
  train(run, dir / "ck", 4);
  const std::string training = dir / "ck/step-00000004/training.json";
  ASSERT_EQ(::unlink(training.c_str()), 0);
  ASSERT_EQ(::mkfifo(training.c_str(), 0644), 0);
  expect_refused_quickly([&] { train(run, dir / "ck", 8, true); },
                         {training + ": not a regular file (it is a FIFO)"});
}

}  // namespace
}  // namespace lockstep
