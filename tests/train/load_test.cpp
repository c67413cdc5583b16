// Frozen :load parameters: trained around and bitwise unchanged, named in a checkpoint by file and
// SHA-256 instead of held, and refused with LS-LOAD-001 once that file changes.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/json_text.hpp"
#include "format/mapped_file.hpp"
#include "format/safetensors.hpp"
#include "lockstep/error.hpp"
#include "lockstep/format.hpp"
#include "lockstep/training_run.hpp"
#include "support/test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/train_support.hpp"

namespace lockstep {
namespace {

const std::string kBin = LOCKSTEP_BINARY;

// A safetensors file holding `name` [256, 8] (the tiny run's embed shape) and another tensor.
std::vector<float> write_frozen(const std::string& path, const std::string& name, uint64_t seed) {
  format::remove_tree(path);
  const std::vector<float> values = test::random_floats(256 * 8, seed, 0.05);
  const std::vector<float> other = test::random_floats(4, seed + 1);
  const format::TensorData tensors[] = {{name, format::DType::f32, {256, 8}, values.data()},
                                        {"something.else", format::DType::f32, {4}, other.data()}};
  format::write_safetensors(path, tensors, {});
  return values;
}

std::span<const float> embed_of(const Model& m) {
  const ParameterInfo& e = m.registry().at("embed");
  return m.parameters().subspan(static_cast<size_t>(e.offset), static_cast<size_t>(e.count));
}

Error load_error(const std::string& path, const LoadOptions& o = {}) {
  try {
    Model::load(path, o);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "loaded " << path;
  return Error(ErrorKind::internal, "");
}

TEST(FrozenLoad, StaysBitwiseUnchangedAndIsNamedBySha256) {
  test::TempDir dir;
  const std::vector<float> frozen = write_frozen(dir / "frozen.safetensors", "tok.weight", 9);
  const std::string run = test::write_tiny_run(
      dir, {{":load", "((embed \"" + dir / "frozen.safetensors" + "\" \"tok.weight\"))"}});
  RunOptions o;
  o.threads = 2;
  run_training(read_run_file(run), dir / "ck", o);

  const std::string step = dir / "ck/step-00000012";
  const auto averaged = Model::load(step);
  LoadOptions trained_options;
  trained_options.trained = true;
  const auto trained = Model::load(step, trained_options);
  EXPECT_TRUE(test::same_bits(embed_of(*averaged), frozen));
  EXPECT_TRUE(test::same_bits(embed_of(*trained), frozen));
  // Everything else trained.
  const auto fresh = init_parameters(averaged->config(), 3);
  EXPECT_FALSE(
      test::same_bits(trained->parameters().subspan(2048), std::span<const float>(fresh).subspan(2048)));
  // The optimizer never moved the frozen tensor's moments.
  const train::Checkpoint ck = train::read_checkpoint(step);
  for (size_t i = 0; i < frozen.size(); ++i) ASSERT_EQ(ck.state.m[i], 0.0f) << i;

  // model.json names the file and its SHA-256; the weights files leave the tensor out.
  const auto j = lockstep::format::parse_json(test::read_file(step + "/model.json"));
  ASSERT_EQ(j["loaded"].size(), 1u);
  EXPECT_EQ(j["loaded"][0]["name"], "embed");
  EXPECT_EQ(j["loaded"][0]["file"], dir / "frozen.safetensors");
  EXPECT_EQ(j["loaded"][0]["tensor"], "tok.weight");
  const std::string bytes = test::read_file(dir / "frozen.safetensors");
  EXPECT_EQ(j["loaded"][0]["sha256"], sha256_hex(bytes.data(), bytes.size()));
  for (const char* weights : {"params.safetensors", "trained.safetensors"}) {
    const format::MappedFile file(step + "/" + weights);
    const auto header = format::parse_safetensors(file.bytes(), weights);
    for (const auto& t : header.tensors) EXPECT_NE(t.name, "embed") << weights;
    EXPECT_EQ(header.tensors.size(), averaged->registry().entries().size() - 1);
  }

  // The file changes: loading (and so serve, inspect, call) and resuming refuse with LS-LOAD-001.
  write_frozen(dir / "frozen.safetensors", "tok.weight", 10);
  const Error changed = load_error(step);
  EXPECT_STREQ(changed.code(), code::load_changed);
  EXPECT_NE(std::string(changed.what())
                .find("frozen parameter 'embed' is loaded from '" + dir / "frozen.safetensors" +
                      "', which has changed: its SHA-256 is "),
            std::string::npos)
      << changed.what();
  EXPECT_STREQ(load_error(step, trained_options).code(), code::load_changed);
  const auto inspect = test::run_command({kBin, "inspect", step});
  EXPECT_NE(inspect.status, 0);
  EXPECT_NE(inspect.err.find("LS-LOAD-001"), std::string::npos) << inspect.err;
  try {
    RunOptions resume;
    resume.resume = true;
    resume.steps = 14;
    run_training(read_run_file(run), dir / "ck", resume);
    FAIL() << "resumed with a changed :load file";
  } catch (const Error& e) {
    EXPECT_STREQ(e.code(), code::load_changed) << e.what();
  }
  // Gone altogether: the same code.
  format::remove_tree(dir / "frozen.safetensors");
  const Error gone = load_error(step);
  EXPECT_STREQ(gone.code(), code::load_changed);
  EXPECT_NE(std::string(gone.what()).find("which cannot be read"), std::string::npos) << gone.what();
}

TEST(FrozenLoad, ARelativePathIsFromTheCurrentDirectory) {
  test::TempDir dir;
  write_frozen(dir / "frozen.safetensors", "embed", 4);
  test::write_tiny_run(
      dir, {{":load", "((embed \"frozen.safetensors\"))"}, {":steps", "4"}, {":eval-every", "0"}});
  const auto trained = test::run_command(
      {"/bin/sh", "-c",
       "cd '" + dir.path() + "' && '" + kBin + "' train run.sx --checkpoint-dir ck --cpu-cores 1"});
  ASSERT_EQ(trained.status, 0) << trained.err;
  const auto here =
      test::run_command({"/bin/sh", "-c", "cd '" + dir.path() + "' && '" + kBin + "' inspect ck"});
  EXPECT_EQ(here.status, 0) << here.err;
  const auto elsewhere = test::run_command({kBin, "inspect", dir / "ck"});
  EXPECT_NE(elsewhere.status, 0);
  EXPECT_NE(elsewhere.err.find(
                "frozen parameter 'embed' is loaded from 'frozen.safetensors', which cannot be read"),
            std::string::npos)
      << elsewhere.err;
}

TEST(FrozenLoad, RefusesABadFileBeforeTraining) {
  test::TempDir dir;
  write_frozen(dir / "f.safetensors", "embed", 4);
  auto refusal = [&](const std::string& load) {
    const std::string run = test::write_tiny_run(dir, {{":load", "(" + load + ")"}});
    try {
      run_training(read_run_file(run), dir / "never");
    } catch (const Error& e) {
      EXPECT_FALSE(format::path_exists(dir / "never"));
      return std::string(e.what());
    }
    ADD_FAILURE() << load;
    return std::string();
  };
  std::string m = refusal("(embed \"" + dir / "missing.safetensors" + "\")");
  EXPECT_NE(m.find(":load of 'embed': " + dir / "missing.safetensors" + ": cannot open: No such file"),
            std::string::npos)
      << m;
  m = refusal("(embed \"" + dir / "f.safetensors" + "\" \"nothing\")");
  EXPECT_NE(m.find(":load of 'embed': " + dir / "f.safetensors" + ": holds no tensor 'nothing'"),
            std::string::npos)
      << m;
  m = refusal("(head \"" + dir / "f.safetensors" + "\" \"embed\")");
  EXPECT_NE(m.find("tensor 'embed' has shape [256, 8], expected [8, 256]"), std::string::npos) << m;
  test::write_file(dir / "junk.safetensors", "junk");
  m = refusal("(embed \"" + dir / "junk.safetensors" + "\")");
  EXPECT_NE(m.find(":load of 'embed': " + dir / "junk.safetensors" + ": truncated"), std::string::npos) << m;
}

// Export runs the checkpoint's model: a run file whose :load set differs (another file, one added or
// removed) is refused as resuming refuses it, naming the parameter and the files; the same set
// exports the frozen tensor's bits.
TEST(FrozenLoad, ExportRefusesARunFileWhoseLoadsDiffer) {
  test::TempDir dir;
  const std::vector<float> frozen = write_frozen(dir / "frozen.safetensors", "embed", 4);
  write_frozen(dir / "other.safetensors", "embed", 5);
  const std::string with_load = "((embed \"" + dir / "frozen.safetensors" + "\"))";
  const std::string run = test::write_tiny_run(dir, {{":load", with_load}, {":steps", "2"}, {":eval-every", "0"}});
  const std::string run_text = test::read_file(run);
  const auto trained = test::run_command({kBin, "train", run, "--checkpoint-dir", dir / "ck", "--cpu-cores", "1"});
  ASSERT_EQ(trained.status, 0) << trained.err;
  auto export_with = [&](const std::string& name, const std::string& text) {
    const std::string edited = dir / (name + ".sx");
    test::write_file(edited, text);
    return test::run_command({kBin, "export", edited, "--checkpoint", dir / "ck", "-o", dir / ("out-" + name)});
  };
  const auto other = export_with(
      "other", std::string(run_text).replace(run_text.find(with_load), with_load.size(),
                                             "((embed \"" + dir / "other.safetensors" + "\"))"));
  EXPECT_NE(other.status, 0);
  EXPECT_NE(other.err.find("the :load parameters differ: embed from '" + dir / "frozen.safetensors"),
            std::string::npos)
      << other.err;
  EXPECT_NE(other.err.find("embed from '" + dir / "other.safetensors" + "'"), std::string::npos) << other.err;
  EXPECT_FALSE(format::path_exists(dir / "out-other"));
  std::string removed_text = run_text;
  removed_text.erase(removed_text.find(":load"), std::string(":load ").size() + with_load.size());
  const auto removed = export_with("removed", removed_text);
  EXPECT_NE(removed.status, 0);
  EXPECT_NE(removed.err.find("' (" ), std::string::npos) << removed.err;
  EXPECT_NE(removed.err.find(" there, none here"), std::string::npos) << removed.err;
  EXPECT_FALSE(format::path_exists(dir / "out-removed"));
  const auto same = export_with("same", run_text);
  ASSERT_EQ(same.status, 0) << same.err;
  EXPECT_TRUE(test::same_bits(embed_of(*Model::load(dir / "out-same")), frozen));
}

}  // namespace
}  // namespace lockstep
