// Training data and the learning-rate schedule: the split, windows as a pure function of
// (seed, step, row), the held-out windows, every data refusal; warm-up, constant and cosine.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <bit>
#include <cmath>

#include "core/rng.hpp"
#include "core/sha256.hpp"
#include "lockstep/error.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/data.hpp"
#include "train/schedule.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

ModelConfig window_config(int32_t length = 8, int32_t batch = 3) {
  ModelConfig c = test::tiny_config(length);
  c.batch = batch;
  return c;
}

std::string data_refusal(const std::vector<std::string>& files, int64_t ppm, const ModelConfig& c) {
  try {
    train::TrainingData data(files, ppm, c);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(TrainingData, ConcatenatesInOrderAndHoldsOutTheLastPart) {
  test::TempDir dir;
  test::write_file(dir / "a", std::string(600, 'a'));
  test::write_file(dir / "b", std::string(401, 'b'));
  const ModelConfig c = window_config();
  const train::TrainingData data({dir / "a", dir / "b"}, 100000, c);
  EXPECT_EQ(data.total_bytes(), 1001);
  EXPECT_EQ(data.held_out_bytes(), 100);  // floor(1001 * 0.1)
  EXPECT_EQ(data.train_bytes(), 901);
  ASSERT_EQ(data.files().size(), 2u);
  EXPECT_EQ(data.files()[0].path, dir / "a");
  EXPECT_EQ(data.files()[0].bytes, 600);
  const std::string b(401, 'b');
  EXPECT_EQ(data.files()[1].sha256, sha256_hex(b.data(), b.size()));
  // The held-out windows come from the end: all 'b'.
  for (int32_t id : data.held_out_windows(5)) EXPECT_EQ(id, 'b');
  // No held-out part at all.
  const train::TrainingData none({dir / "a"}, 0, c);
  EXPECT_EQ(none.held_out_bytes(), 0);
  EXPECT_EQ(none.train_bytes(), 600);
}

TEST(TrainingData, WindowsArePureFunctionsOfSeedStepAndRow) {
  test::TempDir dir;
  std::string bytes(3000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 % 251);
  test::write_file(dir / "d", bytes);
  const ModelConfig c = window_config(8, 3);
  const train::TrainingData data({dir / "d"}, 50000, c);
  const int64_t cols = 9;
  for (int64_t step : {1, 2, 1000, 999999999}) {
    const std::vector<int32_t> ids = data.training_batch(5, step);
    ASSERT_EQ(ids.size(), 27u);
    for (int32_t r = 0; r < 3; ++r) {
      const int64_t start = data.window_start(5, step, r);
      EXPECT_EQ(start, static_cast<int64_t>(random_below(static_cast<uint64_t>(data.train_bytes() - 8), 5,
                                                         train::kWindowStream + static_cast<uint64_t>(r),
                                                         static_cast<uint64_t>(step))));
      ASSERT_GE(start, 0);
      ASSERT_LE(start + cols, data.train_bytes());
      for (int64_t t = 0; t < cols; ++t)
        EXPECT_EQ(ids[static_cast<size_t>(r * cols + t)],
                  static_cast<uint8_t>(bytes[static_cast<size_t>(start + t)]));
    }
    EXPECT_EQ(ids, data.training_batch(5, step));  // again, the same
  }
  EXPECT_NE(data.training_batch(5, 1), data.training_batch(6, 1));
  EXPECT_NE(data.training_batch(5, 1), data.training_batch(5, 2));
}

TEST(TrainingData, HeldOutWindowsSpanThePartEvenly) {
  test::TempDir dir;
  std::string bytes(1000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i % 256);
  test::write_file(dir / "d", bytes);
  const train::TrainingData data({dir / "d"}, 200000, window_config(8, 2));
  ASSERT_EQ(data.train_bytes(), 800);
  const std::vector<int32_t> w = data.held_out_windows(4);
  ASSERT_EQ(w.size(), 36u);
  // Starts at held-out offsets floor(i * (200 - 9) / 3) = 0, 63, 127, 191.
  const int64_t starts[] = {800, 863, 927, 991};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(w[static_cast<size_t>(i * 9)], static_cast<int32_t>(starts[i] % 256));
  EXPECT_EQ(w.back(), 999 % 256);  // the last window ends at the last byte
  EXPECT_EQ(data.held_out_windows(1)[0], 800 % 256);
}

TEST(TrainingData, RefusesMissingEmptyAndTooShortData) {
  test::TempDir dir;
  const ModelConfig c = window_config(8, 2);
  EXPECT_NE(data_refusal({dir / "missing"}, 0, c)
                .find("data file '" + dir / "missing" + "': No such file or directory"),
            std::string::npos);
  ::mkdir((dir / "sub").c_str(), 0755);
  EXPECT_NE(data_refusal({dir / "sub"}, 0, c).find("data file '" + dir / "sub" + "' is not a regular file"),
            std::string::npos);
  test::write_file(dir / "empty", "");
  test::write_file(dir / "ok", std::string(100, 'x'));
  EXPECT_NE(
      data_refusal({dir / "ok", dir / "empty"}, 0, c).find("data file '" + dir / "empty" + "' is empty"),
      std::string::npos);
  test::write_file(dir / "short", std::string(8, 'x'));
  const std::string too_short = data_refusal({dir / "short"}, 0, c);
  EXPECT_NE(too_short.find("the training part of the data ('" + dir / "short" +
                           "', 8 bytes, 0% held out) is 8 bytes, "
                           "shorter than one window of :length + 1 = 9 bytes"),
            std::string::npos)
      << too_short;
  // 100 bytes, 5% held out: 5 bytes, shorter than a window.
  const std::string held = data_refusal({dir / "ok"}, 50000, c);
  EXPECT_NE(held.find("the held-out part of the data (the last 5% of '" + dir / "ok" +
                      "', 100 bytes) is 5 bytes, "
                      "shorter than one window of :length + 1 = 9 bytes"),
            std::string::npos)
      << held;
  // 95% held out leaves 5 bytes for training.
  EXPECT_NE(data_refusal({dir / "ok"}, 950000, c).find("the training part of the data"), std::string::npos);
  // Bytes outside a smaller vocabulary.
  ModelConfig small = c;
  small.vocab_size = 100;
  test::write_file(dir / "high", std::string(50, 'a') + "x" + std::string(50, 'a'));
  EXPECT_NE(data_refusal({dir / "high"}, 0, small)
                .find("data file '" + dir / "high" +
                      "' holds the byte 120 at offset 50, outside the model's "
                      "vocabulary [0, 100)"),
            std::string::npos);
}

TEST(Schedule, WarmupThenCosineToTheFloor) {
  RunSpec run;
  run.lr = 1e-2f;
  run.lr_min = 1e-3f;
  run.warmup = 4;
  run.steps = 14;
  run.schedule = LrSchedule::cosine;
  EXPECT_EQ(learning_rate_at(run, 1), static_cast<float>(1e-2f * 1.0 / 4.0));
  EXPECT_EQ(learning_rate_at(run, 2), static_cast<float>(static_cast<double>(1e-2f) * 2.0 / 4.0));
  EXPECT_EQ(learning_rate_at(run, 4), 1e-2f);
  // Half way through the cosine: the mean of peak and floor.
  EXPECT_NEAR(learning_rate_at(run, 9), (1e-2 + 1e-3) / 2, 1e-9);
  EXPECT_EQ(learning_rate_at(run, 14), 1e-3f);
  EXPECT_EQ(learning_rate_at(run, 15), 1e-3f);
  EXPECT_EQ(learning_rate_at(run, 1000), 1e-3f);
  for (int64_t t = 5; t < 14; ++t) EXPECT_LT(learning_rate_at(run, t + 1), learning_rate_at(run, t)) << t;
  run.schedule = LrSchedule::constant;
  EXPECT_EQ(learning_rate_at(run, 5), 1e-2f);
  EXPECT_EQ(learning_rate_at(run, 100), 1e-2f);
  run.warmup = 0;
  EXPECT_EQ(learning_rate_at(run, 1), 1e-2f);
  // Warm-up longer than the run: the cosine is at its floor after it.
  run.schedule = LrSchedule::cosine;
  run.warmup = 20;
  EXPECT_EQ(learning_rate_at(run, 21), 1e-3f);
}

}  // namespace
}  // namespace lockstep
