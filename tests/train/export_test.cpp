// lockstep export: the exported directory runs with the checkpoint model's bits; refusals;
// the printed summary; q8 packing (expansion bit for bit against NumPy, about a quarter the
// size, logits equal to the expanded f32 model's).
#include <gtest/gtest.h>

#include <filesystem>

#include "format/atomic_write.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

struct TrainedRun {
  test::TempDir dir;
  std::string run_file, location;
  TrainedRun() {
    run_file = test::write_tiny_run(dir);
    location = dir / "ck";
    const auto r = test::run_command({kBin, "train", run_file, "--checkpoint-dir", location});
    EXPECT_EQ(r.status, 0) << r.out << r.err;
  }
};

TEST(Export, WritesAModelDirectoryWithTheCheckpointsBits) {
  TrainedRun run;
  const std::string out = run.dir / "model";
  const auto r = test::run_command({kBin, "export", run.run_file, "--checkpoint", run.location, "-o", out});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("export: " + run.location + "/step-00000012"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("wrote " + out + ": "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  inputs  inputs [1, 8] i32"), std::string::npos) << r.out;
  const auto exported = Model::load(out);
  const auto checkpoint = Model::load(run.location);
  EXPECT_EQ(exported->parameters_sha256(), checkpoint->parameters_sha256());
  EXPECT_EQ(exported->source().step, 12);
  EXPECT_TRUE(exported->source().checkpoint.has_value());
  const auto ids = test::random_ids(8, 256, 1);
  EXPECT_TRUE(test::same_bits(exported->logits({ids.data(), 1, 8}), checkpoint->logits({ids.data(), 1, 8})));
  // --trained exports the trained weights, which a checkpoint with EMA holds beside its averages.
  const auto t = test::run_command({kBin, "export", "--checkpoint", run.location + "/step-00000012", "-o", run.dir / "trained", "--trained"});
  ASSERT_EQ(t.status, 0) << t.err;
  LoadOptions trained;
  trained.trained = true;
  EXPECT_EQ(Model::load(run.dir / "trained")->parameters_sha256(), Model::load(run.location, trained)->parameters_sha256());
  // The exported model serves as any model does: `lockstep call` answers with the same bytes.
  const std::string input(reinterpret_cast<const char*>(ids.data()), 32);
  EXPECT_EQ(test::run_command({kBin, "call", out}, input).out, test::run_command({kBin, "call", run.location}, input).out);
}

TEST(Export, Refusals) {
  TrainedRun run;
  const std::string out = run.dir / "model";
  std::filesystem::create_directory(out);
  auto r = test::run_command({kBin, "export", "--checkpoint", run.location, "-o", out});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  r = test::run_command({kBin, "export", "--checkpoint", run.dir / "missing", "-o", run.dir / "m2"});
  EXPECT_NE(r.err.find("no such file or directory"), std::string::npos) << r.err;
  const auto init = test::run_command({kBin, "init", "--seed", "1", "--d-model", "8", "--n-heads", "2", "--d-ff", "8",
                                       "--n-layers", "1", "--length", "8", "-o", run.dir / "plain"});
  ASSERT_EQ(init.status, 0);
  r = test::run_command({kBin, "export", "--checkpoint", run.dir / "plain", "-o", run.dir / "m3"});
  EXPECT_NE(r.err.find("is a model directory, not a checkpoint"), std::string::npos) << r.err;
  // A run file whose model differs is refused; other edits are allowed and the moved lines printed.
  std::string text = test::read_file(run.run_file);
  const std::string changed = run.dir / "changed.sx";
  test::write_file(changed, std::string(text).replace(text.find(":d-model 8"), 10, ":d-model 16"));
  r = test::run_command({kBin, "export", changed, "--checkpoint", run.location, "-o", run.dir / "m4"});
  EXPECT_NE(r.err.find("model configuration differs"), std::string::npos) << r.err;
  EXPECT_FALSE(format::path_exists(run.dir / "m4"));
  const std::string edited = run.dir / "edited.sx";
  test::write_file(edited, text + "; a comment added after training\n");
  r = test::run_command({kBin, "export", edited, "--checkpoint", run.location, "-o", run.dir / "m5"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find(": ; a comment added after training"), std::string::npos) << r.out;
  r = test::run_command({kBin, "export", "--checkpoint", run.location, "-o", run.dir / "m6", "--pack", "q2"});
  EXPECT_NE(r.err.find("unknown packing 'q2'"), std::string::npos) << r.err;
}

TEST(Export, Q8PacksToAQuarterAndExpandsExactly) {
  TrainedRun run;
  const std::string f32 = run.dir / "f32", q8 = run.dir / "q8";
  ASSERT_EQ(test::run_command({kBin, "export", "--checkpoint", run.location, "-o", f32}).status, 0);
  const auto r = test::run_command({kBin, "export", "--checkpoint", run.location, "-o", q8, "--pack", "q8"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto packed = Model::load(q8);
  EXPECT_EQ(packed->weight_format(), "q8");
  // The expansion, bit for bit, against an independent NumPy expansion of the file.
  const auto check = test::run_command({LOCKSTEP_PYTHON, std::string(LOCKSTEP_SOURCE_DIR) + "/tests/train/q8_numpy.py",
                                        q8 + "/params.safetensors", f32 + "/params.safetensors", packed->parameters_sha256()});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  // The packed model computes exactly what a model of its expanded f32 weights computes.
  const auto expanded = Model::from_parameters(packed->config(), packed->parameters());
  const auto ids = test::random_ids(8, 256, 2);
  EXPECT_TRUE(test::same_bits(packed->logits({ids.data(), 1, 8}), expanded->logits({ids.data(), 1, 8})));
  EXPECT_TRUE(test::same_bits(packed->logits({ids.data(), 1, 8}, {}, {Device::reference, {}}),
                              expanded->logits({ids.data(), 1, 8}, {}, {Device::reference, {}})));
  // Size: int8 matrices with one scale per column, vectors in f32.
  const double ratio = static_cast<double>(std::filesystem::file_size(q8 + "/params.safetensors")) /
                       static_cast<double>(std::filesystem::file_size(f32 + "/params.safetensors"));
  EXPECT_LT(ratio, 0.40) << ratio;
  EXPECT_GT(ratio, 0.24) << ratio;
}

TEST(Export, Q4PacksSmallerAndExpandsExactly) {
  TrainedRun run;
  const std::string f32 = run.dir / "f32", q8 = run.dir / "q4";
  ASSERT_EQ(test::run_command({kBin, "export", "--checkpoint", run.location, "-o", f32}).status, 0);
  const auto r = test::run_command({kBin, "export", "--checkpoint", run.location, "-o", q8, "--pack", "q4"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto packed = Model::load(q8);
  EXPECT_EQ(packed->weight_format(), "q4");
  // The expansion, bit for bit, against an independent NumPy expansion of the file.
  const auto check = test::run_command({LOCKSTEP_PYTHON, std::string(LOCKSTEP_SOURCE_DIR) + "/tests/train/q4_numpy.py",
                                        q8 + "/params.safetensors", f32 + "/params.safetensors", packed->parameters_sha256()});
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  // The packed model computes exactly what a model of its expanded f32 weights computes.
  const auto expanded = Model::from_parameters(packed->config(), packed->parameters());
  const auto ids = test::random_ids(8, 256, 2);
  EXPECT_TRUE(test::same_bits(packed->logits({ids.data(), 1, 8}), expanded->logits({ids.data(), 1, 8})));
  EXPECT_TRUE(test::same_bits(packed->logits({ids.data(), 1, 8}, {}, {Device::reference, {}}),
                              expanded->logits({ids.data(), 1, 8}, {}, {Device::reference, {}})));
  // Size: 4-bit matrices with one scale per 32 rows per column, vectors in f32 (this tiny model
  // is 0.29 of its f32 file; l768 0.16).
  const double ratio = static_cast<double>(std::filesystem::file_size(q8 + "/params.safetensors")) /
                       static_cast<double>(std::filesystem::file_size(f32 + "/params.safetensors"));
  EXPECT_LT(ratio, 0.33) << ratio;
  EXPECT_GT(ratio, 0.12) << ratio;
}

}  // namespace
}  // namespace lockstep
