// Training runs through the library: resuming gives the same bits as running straight through,
// thread counts and devices give byte-identical checkpoints, retention, the refusals of a
// checkpoint location, and what a checkpoint holds.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <bit>
#include <cstring>

#include <nlohmann/json.hpp>

#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "format/model_json.hpp"
#include "format/safetensors.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

RunResult train(const std::string& run_file, const std::string& dir, std::optional<int64_t> steps = {},
                bool resume = false, int threads = 1, Device device = Device::cpu) {
  RunOptions o;
  o.steps = steps;
  o.resume = resume;
  o.threads = threads;
  o.device = device;
  return run_training(read_run_file(run_file), dir, o);
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return "";
}

// `text` with its first `from` replaced by `to`.
std::string replaced(const std::string& text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.substr(0, at) + to + text.substr(at + from.size());
}

void expect_same_files(const std::map<std::string, std::string>& a,
                       const std::map<std::string, std::string>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, bytes] : a) {
    const auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    EXPECT_TRUE(bytes == it->second) << name << " differs";
  }
}

class Observer : public RunObserver {
 public:
  void started(const RunStart& s) override { start = s; }
  void step(const StepReport& r) override { steps.push_back(r); }
  void checkpoint(const CheckpointReport& c) override { checkpoints.push_back(c); }
  RunStart start;
  std::vector<StepReport> steps;
  std::vector<CheckpointReport> checkpoints;
};

TEST(TrainingRun, ResumedRunEqualsTheStraightRun) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  // Straight: 12 steps. Resumed: 6, stop, resume to 12 (6 is not a checkpoint step of the
  // straight run: every run ends with a checkpoint of its last step).
  train(run, dir / "straight");
  const RunResult first = train(run, dir / "resumed", 6);
  EXPECT_EQ(first.last_checkpoint, dir / "resumed/step-00000006");
  const RunResult second = train(run, dir / "resumed", 12, true, 3);  // on another thread count
  EXPECT_EQ(second.first_step, 6);
  EXPECT_EQ(second.last_step, 12);
  EXPECT_EQ(list_checkpoint_steps(dir / "straight"), (std::vector<int64_t>{4, 8, 12}));
  EXPECT_EQ(list_checkpoint_steps(dir / "resumed"), (std::vector<int64_t>{4, 6, 8, 12}));
  // Every file of the final checkpoints, byte for byte, and the states read back.
  expect_same_files(test::checkpoint_files(dir / "straight/step-00000012"),
                    test::checkpoint_files(dir / "resumed/step-00000012"));
  expect_same_files(test::checkpoint_files(dir / "straight/step-00000008"),
                    test::checkpoint_files(dir / "resumed/step-00000008"));
  const train::Checkpoint a = train::read_checkpoint(dir / "straight/step-00000012");
  const train::Checkpoint b = train::read_checkpoint(dir / "resumed/step-00000012");
  EXPECT_TRUE(test::same_bits(a.state.parameters, b.state.parameters));
  EXPECT_TRUE(test::same_bits(a.state.m, b.state.m));
  EXPECT_TRUE(test::same_bits(a.state.v, b.state.v));
  ASSERT_FALSE(a.state.ema.empty());
  EXPECT_TRUE(test::same_bits(a.state.ema, b.state.ema));
  EXPECT_EQ(a.state.completed_steps, 12);
  // The losses of every step, and metrics.jsonl holds each step once.
  const auto losses = test::metrics_loss_bits(dir / "straight/metrics.jsonl");
  EXPECT_EQ(losses.size(), 12u);
  EXPECT_EQ(losses, test::metrics_loss_bits(dir / "resumed/metrics.jsonl"));
}

TEST(TrainingRun, ResumeDropsMetricsPastTheCheckpoint) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  train(run, dir / "r", 6);
  // Lines past step 4 as a run killed after its step-4 checkpoint would leave them, then the
  // step-6 checkpoint gone with it; and a line cut short.
  format::remove_tree(dir / "r/step-00000006");
  const std::string metrics = test::read_file(dir / "r/metrics.jsonl");
  test::write_file(dir / "r/metrics.jsonl", metrics + "{\"step\": 7, \"loss\": 1");
  train(run, dir / "r", 8, true);
  const auto losses = test::metrics_loss_bits(dir / "r/metrics.jsonl");
  EXPECT_EQ(losses.size(), 8u);
  EXPECT_EQ(losses.begin()->first, 1);
  EXPECT_EQ(losses.rbegin()->first, 8);
}

TEST(TrainingRun, ThreadCountsAndDevicesWriteTheSameCheckpoints) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  train(run, dir / "t1", {}, false, 1);
  const auto want = test::checkpoint_files(dir / "t1");
  ASSERT_EQ(want.size(), 3u * 6u);  // three checkpoints of six files
  for (int threads : {2, 3}) {
    const std::string out = dir.path() + "/t" + std::to_string(threads);
    train(run, out, {}, false, threads);
    SCOPED_TRACE(threads);
    expect_same_files(want, test::checkpoint_files(out));
  }
  train(run, dir / "ref", {}, false, 1, Device::reference);
  expect_same_files(want, test::checkpoint_files(dir / "ref"));
}

TEST(TrainingRun, Bf16RunsAreAsReproducible) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir, {{":precision", "bf16"}, {":steps", "6"}});
  train(run, dir / "a", {}, false, 1);
  train(run, dir / "b", {}, false, 2);
  expect_same_files(test::checkpoint_files(dir / "a"), test::checkpoint_files(dir / "b"));
  const auto model = Model::load(dir / "a");
  EXPECT_EQ(model->precision(), Precision::bf16);
  test::write_file(dir / "f32.sx", replaced(test::read_file(run), ":precision bf16", ":precision f32"));
  train(dir / "f32.sx", dir / "f32", {}, false, 1);
  EXPECT_FALSE(test::same_bits(model->parameters(), Model::load(dir / "f32")->parameters()));
}

TEST(TrainingRun, CheckpointsAreModelDirectoriesWithTheTrainingState) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  Observer seen;
  RunOptions o;
  o.threads = 1;
  o.observer = &seen;
  const RunResult r = run_training(read_run_file(run), dir / "c", o);
  EXPECT_EQ(seen.start.first_step, 0);
  EXPECT_EQ(seen.start.last_step, 12);
  EXPECT_EQ(seen.start.tokens_per_step, 16);
  ASSERT_EQ(seen.steps.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(seen.steps[i].step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(seen.steps[i].held_out_loss.has_value(), (i + 1) % 4 == 0) << i;
    EXPECT_EQ(seen.steps[i].lr, learning_rate_at(read_run_file(run), static_cast<int64_t>(i + 1)));
  }
  ASSERT_EQ(seen.checkpoints.size(), 3u);
  ASSERT_TRUE(r.held_out_loss);
  EXPECT_EQ(std::bit_cast<uint32_t>(*r.held_out_loss),
            std::bit_cast<uint32_t>(*seen.steps.back().held_out_loss));

  const std::string step = dir / "c/step-00000012";
  const auto files = test::checkpoint_files(step);
  std::vector<std::string> names;
  for (const auto& [name, bytes] : files) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"model.json", "optimizer.safetensors", "params.safetensors",
                                             "run.sx", "trained.safetensors", "training.json"}));
  EXPECT_EQ(files.at("run.sx"), test::read_file(run));
  // No path of the checkpoint location inside (the run file's own paths are its text).
  for (const auto& [name, bytes] : files) EXPECT_EQ(bytes.find(dir / "c"), std::string::npos) << name;
  const auto model_json = lockstep::format::parse_json(files.at("model.json"));
  EXPECT_EQ(model_json["checkpoint"]["step"], 12);
  EXPECT_EQ(model_json["checkpoint"]["slug"], "tiny-test");
  EXPECT_EQ(model_json["checkpoint"]["path"], nullptr);
  EXPECT_EQ(model_json["weights_averaged"], true);
  EXPECT_EQ(model_json["trained_weights"]["file"], "trained.safetensors");
  EXPECT_FALSE(model_json.contains("loaded"));

  // The model serves the EMA averages; --trained the trained weights.
  const train::Checkpoint ck = train::read_checkpoint(step);
  const auto averaged = Model::load(dir / "c");
  EXPECT_EQ(averaged->source().step, 12);
  EXPECT_FALSE(averaged->source().trained_weights);
  EXPECT_TRUE(test::same_bits(averaged->parameters(), ck.state.ema));
  LoadOptions lo;
  lo.trained = true;
  const auto trained = Model::load(step, lo);
  EXPECT_TRUE(test::same_bits(trained->parameters(), ck.state.parameters));
  EXPECT_FALSE(test::same_bits(ck.state.parameters, ck.state.ema));
  // The held-out loss of the last step is the served weights' mean over the held-out windows.
  const auto ids = [&] {
    const RunSpec spec = read_run_file(run);
    const train::TrainingData data(spec.data, spec.held_out_ppm, spec.model);
    return data.held_out_windows(spec.eval_batches * spec.model.batch);
  }();
  const auto losses = averaged->token_losses({ids.data(), 4, 9});
  float total = 0.0f;
  for (float l : losses) total = total + l;
  EXPECT_EQ(std::bit_cast<uint32_t>(total / 32.0f), std::bit_cast<uint32_t>(*r.held_out_loss));

  // Without EMA, params.safetensors holds the trained weights and there is no trained.safetensors.
  const std::string plain = dir / "plain.sx";
  test::write_file(plain,
                   replaced(test::tiny_run_text(dir / "data.txt", {{":steps", "4"}, {":eval-every", "0"}}),
                            ":ema 0.9", ""));
  train(plain, dir / "p");
  const auto plain_files = test::checkpoint_files(dir / "p/step-00000004");
  EXPECT_EQ(plain_files.count("trained.safetensors"), 0u);
  EXPECT_EQ(lockstep::format::parse_json(plain_files.at("model.json"))["weights_averaged"], false);
  EXPECT_TRUE(test::same_bits(Model::load(dir / "p")->parameters(),
                              train::read_checkpoint(dir / "p/step-00000004").state.parameters));
}

TEST(TrainingRun, RetentionKeepsTheNewest) {
  test::TempDir dir;
  const std::string run =
      test::write_tiny_run(dir, {{":keep", "2"}, {":checkpoint-every", "2"}, {":eval-every", "0"}});
  Observer seen;
  RunOptions o;
  o.threads = 1;
  o.observer = &seen;
  run_training(read_run_file(run), dir / "k", o);
  EXPECT_EQ(list_checkpoint_steps(dir / "k"), (std::vector<int64_t>{10, 12}));
  ASSERT_EQ(seen.checkpoints.size(), 6u);
  EXPECT_TRUE(seen.checkpoints[0].removed.empty());
  EXPECT_EQ(seen.checkpoints[2].removed, (std::vector<int64_t>{2}));
  EXPECT_TRUE(test::temporaries_in(dir / "k").empty());
}

TEST(TrainingRun, RefusesWhatCannotContinue) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  // A fresh run into a location that holds checkpoints.
  train(run, dir / "a", 4);
  std::string m = refusal([&] { train(run, dir / "a"); });
  EXPECT_NE(m.find(std::string("'") + dir.path() +
                   "/a' already holds checkpoints (newest: step 4); continue them with --resume"),
            std::string::npos)
      << m;
  // Resuming a location that does not exist, or holds no complete checkpoint.
  m = refusal([&] { train(run, dir / "none", {}, true); });
  EXPECT_NE(m.find("is not a directory of checkpoints to resume from; start the run without --resume"),
            std::string::npos)
      << m;
  EXPECT_FALSE(format::path_exists(dir / "none"));
  ::mkdir((dir / "empty").c_str(), 0755);
  m = refusal([&] { train(run, dir / "empty", {}, true); });
  EXPECT_NE(m.find("holds no complete checkpoint to resume from; start the run without --resume"),
            std::string::npos)
      << m;
  // Another model configuration.
  const std::string text = test::read_file(run);
  test::write_file(dir / "wide.sx", replaced(text, ":d-model 8", ":d-model 16"));
  m = refusal([&] { train(dir / "wide.sx", dir / "a", {}, true); });
  EXPECT_NE(m.find("cannot resume from " + dir / "a/step-00000004" + " with " + dir / "wide.sx" +
                   ": the model configuration differs (:d-model 8 there, 16 here)"),
            std::string::npos)
      << m;
  // EMA switched off.
  test::write_file(dir / "no_ema.sx", replaced(text, ":ema 0.9", ":ema 0"));
  m = refusal([&] { train(dir / "no_ema.sx", dir / "a", {}, true); });
  EXPECT_NE(m.find("the checkpoint keeps an EMA but the run file's :ema is 0"), std::string::npos) << m;
  // Data that changed.
  const std::string data = test::read_file(dir / "data.txt");
  test::write_file(dir / "data.txt", data.substr(0, data.size() - 1) + "!");
  m = refusal([&] { train(run, dir / "a", {}, true); });
  EXPECT_NE(m.find("the data differs from what the checkpoint trained on"), std::string::npos) << m;
  test::write_file(dir / "data.txt", data);
  // An end before the checkpoint.
  m = refusal([&] { train(run, dir / "a", 3, true); });
  EXPECT_NE(m.find("is step 4, past the last step asked for, 3"), std::string::npos) << m;
  // The same end: nothing to do, and nothing changes.
  const auto before = test::checkpoint_files(dir / "a");
  const RunResult same = train(run, dir / "a", 4, true);
  EXPECT_EQ(same.first_step, 4);
  EXPECT_EQ(same.last_step, 4);
  EXPECT_EQ(same.last_checkpoint, dir / "a/step-00000004");
  expect_same_files(before, test::checkpoint_files(dir / "a"));
  // A damaged checkpoint is refused, naming the file, not skipped.
  const std::string optimizer = dir / "a/step-00000004/optimizer.safetensors";
  const std::string saved = test::read_file(optimizer);
  test::write_file(optimizer, saved.substr(0, saved.size() - 4));
  m = refusal([&] { train(run, dir / "a", 8, true); });
  EXPECT_NE(m.find(optimizer + ": "), std::string::npos) << m;
  test::write_file(optimizer, saved);
  // Remote locations.
  m = refusal([&] { train(run, "s3://bucket/run"); });
  EXPECT_NE(m.find("remote checkpoint locations are not supported"), std::string::npos) << m;
  // Bad data is refused before the location is touched.
  test::write_file(dir / "short.sx", test::tiny_run_text(dir / "missing.txt"));
  m = refusal([&] { train(dir / "short.sx", dir / "never"); });
  EXPECT_NE(m.find("data file '" + dir / "missing.txt" + "': No such file or directory"), std::string::npos)
      << m;
  EXPECT_FALSE(format::path_exists(dir / "never"));
}

TEST(TrainingRun, UnwritableCheckpointDirectoryIsAClearError) {
  test::TempDir dir;
  const std::string run = test::write_tiny_run(dir);
  test::write_file(dir / "file", "not a directory");
  std::string m = refusal([&] { train(run, dir / "file/sub"); });
  EXPECT_NE(m.find("cannot create the checkpoint directory '" + dir / "file/sub" + "': " + dir / "file" +
                   ": Not a directory"),
            std::string::npos)
      << m;
  m = refusal([&] { train(run, dir / "file"); });
  EXPECT_NE(m.find("cannot create the checkpoint directory '" + dir / "file" + "'"), std::string::npos) << m;
  // Nested missing parents are created.
  train(run, dir / "x/y/z", 2);
  EXPECT_EQ(list_checkpoint_steps(dir / "x/y/z"), (std::vector<int64_t>{2}));
}

}  // namespace
}  // namespace lockstep
