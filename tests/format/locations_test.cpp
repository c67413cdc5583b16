// What a model path names: a model directory, its model.json, a checkpoint step directory, or a
// checkpoint location (its newest complete step); and the paths that name none of these.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>

#include "core/sha256.hpp"
#include "format/format_fixtures.hpp"
#include "format/mapped_file.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "lockstep/os_error.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using test::HasAll;

void make_dir(const std::string& path) { ASSERT_EQ(::mkdir(path.c_str(), 0755), 0) << path; }

// A resolve_model_path refusal: its kind and message.
std::pair<ErrorKind, std::string> resolve_error(const std::string& path) {
  try {
    resolve_model_path(path);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  ADD_FAILURE() << "resolved " << path;
  return {ErrorKind::internal, ""};
}

TEST(StepNames, ZeroPaddedToEightDigits) {
  EXPECT_EQ(step_directory_name(0), "step-00000000");
  EXPECT_EQ(step_directory_name(200), "step-00000200");
  EXPECT_EQ(step_directory_name(99999999), "step-99999999");
  EXPECT_EQ(step_directory_name(123456789), "step-123456789");
  EXPECT_THROW(step_directory_name(-1), Error);
}

TEST(ResolveModelPath, ModelDirectory) {
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  test::write_init_model(dir, test::tiny_config());
  for (const std::string& path : {dir, dir + "/", dir + "//"}) {
    const ResolvedPath r = resolve_model_path(path);
    EXPECT_EQ(r.model_dir, dir) << path;
    EXPECT_FALSE(r.checkpoint_step);
    EXPECT_FALSE(r.step.has_value());
  }
}

TEST(ResolveModelPath, ModelJsonFile) {
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  test::write_init_model(dir, test::tiny_config());
  const ResolvedPath r = resolve_model_path(dir + "/model.json");
  EXPECT_EQ(r.model_dir, dir);
  EXPECT_FALSE(r.checkpoint_step);
}

TEST(ResolveModelPath, StepDirectory) {
  test::TempDir tmp;
  make_dir(tmp / "run");
  const std::string step = tmp / "run/step-00000200";
  const std::vector<float> params = test::write_init_model(step, test::tiny_config(), 3);
  const ResolvedPath r = resolve_model_path(step);
  EXPECT_EQ(r.model_dir, step);
  EXPECT_TRUE(r.checkpoint_step);
  EXPECT_EQ(r.step, 200);
  EXPECT_EQ(resolve_model_path(step + "/model.json").step, 200);

  LoadOptions options;
  options.threads = 1;
  const auto model = Model::load(step, options);
  EXPECT_EQ(model->source().directory, step);
  EXPECT_EQ(model->source().step, 200);
  EXPECT_EQ(model->parameters_sha256(), sha256_f32_le(params));
}

// A location whose steps were written out of order, one of them past eight digits, beside an
// incomplete step, a temporary and names that are not step directories.
TEST(ResolveModelPath, LocationResolvesToItsNewestCompleteStep) {
  test::TempDir tmp;
  const std::string loc = tmp / "run";
  make_dir(loc);
  const ModelConfig config = test::tiny_config(8);
  test::write_init_model(loc + "/step-00000200", config, 200);
  const std::vector<float> newest = test::write_init_model(loc + "/step-00001000", config, 1000);
  test::write_init_model(loc + "/step-00000030", config, 30);

  ResolvedPath r = resolve_model_path(loc);
  EXPECT_EQ(r.model_dir, loc + "/step-00001000");
  EXPECT_TRUE(r.checkpoint_step);
  EXPECT_EQ(r.step, 1000);
  LoadOptions options;
  options.threads = 1;
  EXPECT_EQ(Model::load(loc, options)->parameters_sha256(), sha256_f32_le(newest));

  // Newer, but incomplete (no model.json): skipped.
  make_dir(loc + "/step-00002000");
  test::write_file(loc + "/step-00002000/params.safetensors", "partial");
  // Newer and complete, but a temporary a writer has not renamed yet: ignored.
  test::write_init_model(loc + "/.step-00003000.tmp-Ab12Cd", config, 3000);
  // Not step directories: too few digits, a letter, a leading zero past eight digits, a file.
  test::write_init_model(loc + "/step-4000", config, 1);
  test::write_init_model(loc + "/step-0000500x", config, 1);
  test::write_init_model(loc + "/step-000006000", config, 1);
  test::write_file(loc + "/step-00007000", "not a directory");
  r = resolve_model_path(loc + "/");
  EXPECT_EQ(r.model_dir, loc + "/step-00001000");
  EXPECT_EQ(r.step, 1000);
  EXPECT_EQ(list_checkpoint_steps(loc), (std::vector<int64_t>{30, 200, 1000}));

  // Past eight digits the name grows, and such a step is still found and still the newest.
  test::write_init_model(loc + "/" + step_directory_name(123456789), config, 9);
  r = resolve_model_path(loc);
  EXPECT_EQ(r.model_dir, loc + "/step-123456789");
  EXPECT_EQ(r.step, 123456789);
  EXPECT_EQ(list_checkpoint_steps(loc), (std::vector<int64_t>{30, 200, 1000, 123456789}));
}

TEST(ResolveModelPath, EmptyDirectoryIsRefused) {
  test::TempDir tmp;
  make_dir(tmp / "empty");
  const auto [kind, message] = resolve_error(tmp / "empty");
  EXPECT_EQ(kind, ErrorKind::invalid_argument);
  EXPECT_TRUE(HasAll(message, {"'" + (tmp / "empty") + "' is not a model directory",
                               "holds no model.json and no complete step-NNNNNNNN directory"}));
  EXPECT_TRUE(list_checkpoint_steps(tmp / "empty").empty());
}

TEST(ResolveModelPath, LocationWithOnlyIncompleteStepsIsRefused) {
  test::TempDir tmp;
  make_dir(tmp / "run");
  make_dir(tmp / "run/step-00000100");
  test::write_init_model(tmp / "run/.step-00000200.tmp-XXXXXX", test::tiny_config(), 1);
  const auto [kind, message] = resolve_error(tmp / "run");
  EXPECT_EQ(kind, ErrorKind::invalid_argument);
  EXPECT_TRUE(HasAll(message, {"no complete step-NNNNNNNN directory"}));
}

TEST(ResolveModelPath, MissingPathIsRefused) {
  test::TempDir tmp;
  const auto [kind, message] = resolve_error(tmp / "nothing-here");
  EXPECT_EQ(kind, ErrorKind::io);
  EXPECT_TRUE(HasAll(message, {"'" + (tmp / "nothing-here") + "': no such file or directory"}));
}

// The errno travels with the error (lockstep::OsError), so that front ends can name the kind of
// refusal: Python raises FileNotFoundError for ENOENT, PermissionError for EACCES.
int os_errno_of_resolve(const std::string& path) {
  try {
    resolve_model_path(path);
  } catch (const OsError& e) {
    return e.error_number();
  } catch (const Error& e) {
    ADD_FAILURE() << "not an OsError: " << e.what();
    return -1;
  }
  ADD_FAILURE() << "resolved " << path;
  return -1;
}

TEST(ResolveModelPath, MissingPathCarriesEnoent) {
  test::TempDir tmp;
  EXPECT_EQ(os_errno_of_resolve(tmp / "nothing-here"), ENOENT);
  EXPECT_EQ(os_errno_of_resolve(tmp / "nothing-here/model.json"), ENOENT);
  test::write_file(tmp / "file", "x");
  EXPECT_EQ(os_errno_of_resolve(tmp / "file/below"), ENOENT);  // ENOTDIR: nothing there either
}

TEST(MappedFile, OpenFailureCarriesItsErrno) {
  test::TempDir tmp;
  try {
    format::MappedFile file(tmp / "absent.safetensors");
    ADD_FAILURE() << "opened a missing file";
  } catch (const OsError& e) {
    EXPECT_EQ(e.error_number(), ENOENT);
    EXPECT_EQ(e.kind(), ErrorKind::io);
  }
}

TEST(ResolveModelPath, RemoteLocationIsRefused) {
  const auto [kind, message] = resolve_error("s3://bucket/runs/tiny");
  EXPECT_EQ(kind, ErrorKind::unsupported);
  EXPECT_TRUE(HasAll(message, {"'s3://bucket/runs/tiny': remote checkpoint locations are not supported"}));
}

TEST(ResolveModelPath, FileThatIsNotModelJsonIsRefused) {
  test::TempDir tmp;
  test::write_init_model(tmp / "m", test::tiny_config());
  const auto [kind, message] = resolve_error(tmp / "m/params.safetensors");
  EXPECT_EQ(kind, ErrorKind::invalid_argument);
  EXPECT_TRUE(HasAll(message, {"'" + (tmp / "m/params.safetensors") + "' is a file but not a model.json"}));
}

TEST(ResolveModelPath, EmptyPathIsRefused) {
  const auto [kind, message] = resolve_error("");
  EXPECT_EQ(kind, ErrorKind::invalid_argument);
  EXPECT_EQ(message, "model path is empty");
}

TEST(ModelLoad, TrainedWeightsOfAModelDirectoryAreRefused) {
  test::TempDir tmp;
  test::write_init_model(tmp / "m", test::tiny_config());
  const test::Refusal r = test::load_refusal(tmp / "m", /*trained=*/true);
  ASSERT_TRUE(r.thrown);
  EXPECT_EQ(r.kind, ErrorKind::invalid_argument);
  EXPECT_TRUE(HasAll(r.message, {"'" + (tmp / "m") + "' is a model directory, not a checkpoint"}));
}

}  // namespace
}  // namespace lockstep
