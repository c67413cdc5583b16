// The loader's limits (docs/LIMITS.md): a configuration is checked against its weights file
// before anything of the configuration's size is allocated, a configuration past
// max_parameters is refused with the bytes it would need, model.json's objects that define the
// model refuse fields they do not know by name, and nothing but a regular file is read (a FIFO
// is refused at once instead of hanging the reader).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "format/format_fixtures.hpp"
#include "format/mapped_file.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using nlohmann::ordered_json;
using test::HasAll;

// A configuration of about 108 million parameters (432 MB as f32) for a tiny model's file.
ModelConfig large_config() {
  ModelConfig c = test::tiny_config();
  c.d_model = 2048;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.d_ff = 6144;
  return c;
}

// Rewrites DIR/model.json for `config`, every list consistent with it, the weights file and its
// SHA-256 left as they are: a model.json that claims another model than its file holds.
void claim_config(const std::string& dir, const ModelConfig& config) {
  const std::string path = dir + "/model.json";
  format::ModelDescription d = format::parse_model_json(test::read_file(path), path);
  d.config = config;
  test::write_file(path, format::render_model_json(d));
}

long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

TEST(LoaderLimits, AConfigurationLargerThanItsFileIsRefusedBeforeItsMemoryIsTaken) {
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  test::write_init_model(dir, test::tiny_config());
  const ModelConfig big = large_config();
  claim_config(dir, big);
  const int64_t params = big.parameter_count();
  ASSERT_EQ(params, ParameterRegistry(big).total());
  ASSERT_GT(params * 4, int64_t{400} << 20);

  const long before = peak_rss_kib();
  const test::Refusal r = test::load_refusal(dir);
  const long grew_mib = (peak_rss_kib() - before) / 1024;
  ASSERT_TRUE(r.thrown);
  EXPECT_EQ(r.kind, ErrorKind::format);
  // The first tensor that differs, and both sizes: what the configuration needs, what the file
  // holds (the tiny model's 14,160 parameters as f32).
  EXPECT_TRUE(HasAll(r.message, {dir + "/params.safetensors: parameter 'embed' has shape [256, 16], expected [256, 2048]",
                                 "model.json's configuration, " + std::to_string(params) + " parameters, needs " +
                                     std::to_string(params * 4) + " bytes of f32 tensor data here; the file holds " +
                                     std::to_string(14160 * 4)}));
  // The 432 MB were never taken (the peak of the whole test process grew by less than 64 MiB).
  EXPECT_LT(grew_mib, 64) << "loading took " << grew_mib << " MiB before refusing";
}

TEST(LoaderLimits, TheWeightsFileIsCheckedWholeBeforeTheParametersAreAllocated) {
  // In memory: a file holding all but its last tensor is refused naming it, with both sizes.
  const ModelConfig c = test::tiny_config();
  test::TempDir tmp;
  test::write_init_model(tmp / "m", c);
  test::edit_safetensors(tmp / "m", [](ordered_json& h, std::string& data) {
    const auto end = h["head"]["data_offsets"][0].get<size_t>();
    h.erase("head");
    data.resize(end);
  });
  const std::string bytes = test::read_file(tmp / "m/params.safetensors");
  try {
    format::read_weights_bytes({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "w", c,
                               std::string(64, '0'));
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(HasAll(e.what(), {"w: parameter 'head' is missing (model.json's configuration, 14160 parameters, "
                                  "needs 56640 bytes of f32 tensor data here; the file holds 40256)"}));
  }
}

TEST(LoaderLimits, AConfigurationPastTheParameterCapIsRefusedWithTheBytesItNeeds) {
  ModelConfig c = test::tiny_config();
  c.vocab_size = 1 << 20;
  c.d_model = 8192;
  c.n_heads = 16;
  c.n_kv_heads = 16;
  c.d_ff = 32768;
  c.n_layers = 32;
  const int64_t n = c.parameter_count();
  ASSERT_GT(n, max_parameters);
  const std::string want = "the model has " + std::to_string(n) + " parameters, which need " +
                           std::to_string(n * 4) + " bytes as f32, more than the 2147483648 parameters (" +
                           "8589934592 bytes) lockstep builds, loads or trains";
  try {
    c.validate();
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_TRUE(HasAll(e.what(), {want}));
  }
  // The same refusal from model.json, before the weights file is opened.
  test::TempDir tmp;
  const std::string dir = tmp / "model";
  test::write_init_model(dir, test::tiny_config());
  test::edit_model_json(dir, [&](ordered_json& j) {
    j["config"]["vocab_size"] = c.vocab_size;
    j["config"]["d_model"] = c.d_model;
    j["config"]["n_heads"] = c.n_heads;
    j["config"]["n_kv_heads"] = c.n_kv_heads;
    j["config"]["d_ff"] = c.d_ff;
    j["config"]["n_layers"] = c.n_layers;
  });
  ASSERT_EQ(::unlink((dir + "/params.safetensors").c_str()), 0);
  const test::Refusal r = test::load_refusal(dir);
  ASSERT_TRUE(r.thrown);
  EXPECT_EQ(r.kind, ErrorKind::format);
  EXPECT_TRUE(HasAll(r.message, {dir + "/model.json: model config: " + want}));
  // At the cap itself: accepted (2^31 parameters exactly is not more than the cap). With d_model
  // 1024 and one head, total / 1024 = 2 vocab + 1 + (2 + 4096 + 3 d_ff) = 2^21.
  ModelConfig at = test::tiny_config();
  at.vocab_size = 653312;
  at.d_model = 1024;
  at.n_heads = 1;
  at.n_kv_heads = 1;
  at.n_layers = 1;
  at.d_ff = 262143;
  EXPECT_EQ(at.parameter_count(), max_parameters);
  EXPECT_NO_THROW(at.validate());
  at.d_ff += 1;
  EXPECT_THROW(at.validate(), Error);
}

// ---------------------------------------------------------------------------------------------
// model.json: fields nobody defined

class UnknownFields : public ::testing::Test {
 protected:
  void SetUp() override { test::write_init_model(dir_, test::tiny_config()); }
  void Edit(const std::function<void(ordered_json&)>& edit) { test::edit_model_json(dir_, edit); }
  std::string Refused() {
    const test::Refusal r = test::load_refusal(dir_);
    EXPECT_TRUE(r.thrown);
    EXPECT_EQ(r.kind, ErrorKind::format);
    return r.message;
  }
  test::TempDir tmp_;
  std::string dir_ = tmp_ / "model";
};

TEST_F(UnknownFields, AMisspelledConfigFieldIsNamed) {
  Edit([](ordered_json& j) {
    j["config"]["d_modle"] = j["config"]["d_model"];
    j["config"].erase("d_model");
  });
  EXPECT_TRUE(HasAll(Refused(), {dir_ + "/model.json: config has an unknown field 'd_modle' (its fields are "
                                        "vocab_size, length, d_model, n_layers, n_heads, n_kv_heads, d_ff, "
                                        "norm_eps, rope_theta, batch, qkv_bias, o_bias, rope_scaling)"}));
  // Beside the right one as well: a field no reader uses is a mistake in config.
  test::TempDir other;
  dir_ = other / "model";
  SetUp();
  Edit([](ordered_json& j) { j["config"]["dropout"] = 0.1; });
  EXPECT_TRUE(HasAll(Refused(), {"config has an unknown field 'dropout'"}));
}

TEST_F(UnknownFields, WeightsLoadedAndCheckpointObjectsRefuseThem) {
  Edit([](ordered_json& j) { j["weights"]["dtype"] = "F32"; });
  EXPECT_TRUE(HasAll(Refused(), {"weights has an unknown field 'dtype' (its fields are file, format, "
                                 "parameters_sha256)"}));
  test::TempDir a;
  dir_ = a / "model";
  SetUp();
  Edit([](ordered_json& j) { j["checkpoint"] = {{"step", 3}, {"slgu", "x"}}; });
  EXPECT_TRUE(HasAll(Refused(), {"checkpoint has an unknown field 'slgu' (its fields are step, slug, path)"}));
  test::TempDir b;
  dir_ = b / "model";
  SetUp();
  Edit([](ordered_json& j) {
    j["loaded"] = ordered_json::array(
        {{{"name", "embed"}, {"file", "x"}, {"tensor", "t"}, {"sha256", std::string(64, 'a')}, {"hash", 1}}});
  });
  EXPECT_TRUE(HasAll(Refused(), {"loaded[0] has an unknown field 'hash' (its fields are name, file, tensor, sha256)"}));
}

TEST_F(UnknownFields, TheTopLevelIgnoresThemUnlessARequiredFieldIsMissing) {
  // docs/FORMAT.md: a later writer may add top-level fields; this reader ignores them.
  Edit([](ordered_json& j) { j["comment"] = "made by hand"; });
  EXPECT_NO_THROW(Model::load(dir_));
  // But a required field missing beside an unknown one is most likely misspelled: both named.
  Edit([](ordered_json& j) {
    j["weigths"] = j["weights"];
    j.erase("weights");
  });
  EXPECT_TRUE(HasAll(Refused(), {"model.json has no field 'weights' but an unknown field 'comment' (misspelled?)"}));
  Edit([](ordered_json& j) { j.erase("comment"); });
  EXPECT_TRUE(HasAll(Refused(), {"model.json has no field 'weights' but an unknown field 'weigths' (misspelled?)"}));
}

// ---------------------------------------------------------------------------------------------
// Only regular files are read

// Runs `read` in a child process bounded by a 20 s alarm; the child exits 0 when `read` throws
// an Error whose message holds every one of `parts`. A reader that blocks is killed by SIGALRM.
void expect_refused_quickly(const std::function<void()>& read, const std::vector<std::string>& parts) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::alarm(20);
    try {
      read();
      ::_exit(3);
    } catch (const Error& e) {
      const bool ok = HasAll(e.what(), parts);
      if (!ok) std::fprintf(stderr, "refused with: %s\n", e.what());
      ::_exit(ok ? 0 : 4);
    }
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  if (WIFSIGNALED(status)) {
    ADD_FAILURE() << "the reader hung (killed by signal " << WTERMSIG(status) << ")";
  } else {
    EXPECT_EQ(WEXITSTATUS(status), 0) << "3: accepted, 4: refused with another message";
  }
}

TEST(OnlyRegularFiles, AFifoIsRefusedAtOnceByEveryReader) {
  test::TempDir tmp;
  const std::string fifo = tmp / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const std::string is_fifo = fifo + ": not a regular file (it is a FIFO)";
  expect_refused_quickly([&] { format::MappedFile f(fifo); }, {is_fifo});
  expect_refused_quickly([&] { format::read_text_file(fifo, 1024); }, {is_fifo});
  expect_refused_quickly([&] { format::read_tensor_file(fifo, "t", {1}); }, {is_fifo});
  expect_refused_quickly([&] { format::read_text_file(tmp.path(), 1024); },
                         {tmp.path() + ": not a regular file (it is a directory)"});

  // A model directory whose weights file, or model.json, is a FIFO.
  const std::string dir = tmp / "model";
  test::write_init_model(dir, test::tiny_config());
  const std::string weights = dir + "/params.safetensors";
  ASSERT_EQ(::unlink(weights.c_str()), 0);
  ASSERT_EQ(::mkfifo(weights.c_str(), 0644), 0);
  expect_refused_quickly([&] { Model::load(dir); }, {weights + ": not a regular file (it is a FIFO)"});
  // model.json as a FIFO: the directory is not a model directory (and nothing blocks).
  const std::string json = dir + "/model.json";
  ASSERT_EQ(::rename(json.c_str(), (tmp / "model.json.saved").c_str()), 0);
  ASSERT_EQ(::mkfifo(json.c_str(), 0644), 0);
  expect_refused_quickly([&] { Model::load(dir); }, {dir + "' is not a model directory", "holds no model.json"});
  expect_refused_quickly([&] { format::parse_model_json(format::read_text_file(json, 1 << 20), json); },
                         {json + ": not a regular file (it is a FIFO)"});
}

}  // namespace
}  // namespace lockstep
