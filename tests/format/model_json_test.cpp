// model.json: what a written one holds, render/parse round trips, and every refusal naming the
// file and the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/format_fixtures.hpp"
#include "format/json_text.hpp"
#include "format/model_json.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using nlohmann::ordered_json;
using test::HasAll;
using test::Refusal;

TEST(ModelJson, WrittenFileStatesLayoutIoAndParameters) {
  test::TempDir tmp;
  const ModelConfig config = test::tiny_gqa_config(12);
  test::write_init_model(tmp / "m", config);
  const nlohmann::json j = lockstep::format::parse_json(test::read_file(tmp / "m/model.json"));
  EXPECT_EQ(j.at("format"), "lockstep.model");
  EXPECT_EQ(j.at("format_version"), 2);
  EXPECT_EQ(j.at("architecture"), "decoder-lm");
  EXPECT_EQ(j.at("profile"), profile_name());
  EXPECT_EQ(j.at("precision"), "f32");
  EXPECT_EQ(j.at("matrix_layout"), "in_out");
  EXPECT_EQ(j.at("config").at("d_model"), 24);
  EXPECT_EQ(j.at("config").at("n_kv_heads"), 2);
  EXPECT_EQ(j.at("config").at("norm_eps").get<double>(), 1e-5);
  EXPECT_EQ(j.at("inputs"), lockstep::format::parse_json(R"([{"name":"inputs","shape":[1,12],"dtype":"i32"}])"));
  EXPECT_EQ(j.at("outputs"), lockstep::format::parse_json(R"([{"name":"logits","shape":[1,12,256],"dtype":"f32"},
                                                        {"name":"hidden","shape":[1,12,24],"dtype":"f32"}])"));
  EXPECT_TRUE(j.at("checkpoint").is_null());
  EXPECT_EQ(j.at("weights").at("file"), "params.safetensors");
  EXPECT_EQ(j.at("weights").at("format"), "float32");
  EXPECT_EQ(j.at("weights_averaged"), false);
  EXPECT_TRUE(j.at("trained_weights").is_null());
  const ParameterRegistry registry(config);
  EXPECT_EQ(j.at("parameter_count"), registry.total());
  ASSERT_EQ(j.at("parameters").size(), registry.entries().size());
  EXPECT_EQ(j.at("parameters")[0], lockstep::format::parse_json(R"({"name":"embed","shape":[256,24],"offset":0})"));
}

// docs/FORMAT.md's example is what `lockstep init --seed 1` writes for its configuration.
TEST(ModelJson, DocumentedExampleIsWhatLockstepWrites) {
  const std::string doc = test::read_file(std::string(LOCKSTEP_SOURCE_DIR) + "/docs/FORMAT.md");
  const size_t begin = doc.find("```json\n");
  ASSERT_NE(begin, std::string::npos) << "no json example in docs/FORMAT.md";
  const size_t end = doc.find("```", begin + 8);
  ASSERT_NE(end, std::string::npos);
  const nlohmann::json example = lockstep::format::parse_json(doc.substr(begin + 8, end - begin - 8));

  ModelConfig config;
  config.vocab_size = 8;
  config.length = 4;
  config.d_model = 4;
  config.n_layers = 1;
  config.n_heads = 2;
  config.n_kv_heads = 2;
  config.d_ff = 4;
  config.batch = 1;
  test::TempDir tmp;
  test::write_init_model(tmp / "m", config, 1);
  EXPECT_EQ(lockstep::format::parse_json(test::read_file(tmp / "m/model.json")), example);
}

format::ModelDescription full_description() {
  format::ModelDescription d;
  d.config = test::tiny_gqa_config(32);
  d.config.norm_eps = 0.1f;  // no short binary fraction: the decimal must read back to these bits
  d.config.rope_theta = 500000.0f;
  d.profile = profile_name();
  d.precision = Precision::bf16;
  d.source.step = 1200;
  d.source.slug = "tiny-run";
  d.source.checkpoint = "/runs/tiny/step-00001200";
  d.weights = {"params.safetensors", "float32", std::string(64, 'a')};
  d.weights_averaged = true;
  d.trained = format::WeightsFile{"trained.safetensors", "float32", std::string(64, 'b')};
  return d;
}

TEST(ModelJson, RenderParseRoundTrip) {
  const format::ModelDescription d = full_description();
  const std::string text = format::render_model_json(d);
  const format::ModelDescription back = format::parse_model_json(text, "m.json");
  EXPECT_EQ(back.config, d.config);
  EXPECT_EQ(std::memcmp(&back.config.norm_eps, &d.config.norm_eps, sizeof(float)), 0);
  EXPECT_EQ(back.profile, d.profile);
  EXPECT_EQ(back.precision, d.precision);
  EXPECT_EQ(back.source.step, d.source.step);
  EXPECT_EQ(back.source.slug, d.source.slug);
  EXPECT_EQ(back.source.checkpoint, d.source.checkpoint);
  EXPECT_EQ(back.weights.file, d.weights.file);
  EXPECT_EQ(back.weights.sha256, d.weights.sha256);
  EXPECT_TRUE(back.weights_averaged);
  ASSERT_TRUE(back.trained.has_value());
  EXPECT_EQ(back.trained->file, "trained.safetensors");
  EXPECT_EQ(back.trained->sha256, std::string(64, 'b'));
  EXPECT_EQ(format::render_model_json(back), text);
}

TEST(ModelJson, ConfigFloatsKeepTheirBits) {
  for (const float eps : {1e-5f, 1e-6f, 3.0e-7f, 0.3f, 1.17549435e-38f}) {
    for (const float theta : {10000.0f, 1.0000001f, 123456.79f, 3.4028235e38f}) {
      format::ModelDescription d = full_description();
      d.config.norm_eps = eps;
      d.config.rope_theta = theta;
      const auto back = format::parse_model_json(format::render_model_json(d), "m.json");
      EXPECT_EQ(std::memcmp(&back.config.norm_eps, &eps, 4), 0) << eps;
      EXPECT_EQ(std::memcmp(&back.config.rope_theta, &theta, 4), 0) << theta;
    }
  }
}

// The imported architectures' fields (qkv_bias, o_bias, rope_scaling) round trip, with their
// bits; a model without them writes none of them, so its model.json is as it always was.
TEST(ModelJson, BiasAndRopeScalingFieldsRoundTrip) {
  format::ModelDescription plain = full_description();
  EXPECT_EQ(format::render_model_json(plain).find("bias"), std::string::npos);
  EXPECT_EQ(format::render_model_json(plain).find("rope_scaling"), std::string::npos);
  format::ModelDescription d = full_description();
  d.config.qkv_bias = true;
  d.config.o_bias = true;
  d.config.rope_scaling = RopeScaling{32.0f, 1.0f, 4.0f, 8192};
  d.config.rope_scaling->low_freq_factor = 1.1f;  // not a short decimal in binary
  const std::string text = format::render_model_json(d);
  EXPECT_NE(text.find(R"("rope_scaling": {
      "type": "llama3",)"), std::string::npos) << text;
  const format::ModelDescription back = format::parse_model_json(text, "m.json");
  EXPECT_EQ(back.config, d.config);
  EXPECT_EQ(format::render_model_json(back), text);
  for (const bool qkv : {false, true}) {  // one without the other
    format::ModelDescription one = full_description();
    one.config.qkv_bias = qkv;
    one.config.o_bias = !qkv;
    EXPECT_EQ(format::parse_model_json(format::render_model_json(one), "m.json").config, one.config);
  }
}

TEST(ModelJson, RegistryHasBiasesOnlyWhereTheConfigSaysSo) {
  ModelConfig c = test::tiny_gqa_config(12);
  const ParameterRegistry plain(c);
  c.qkv_bias = true;
  const ParameterRegistry qkv(c);
  c.o_bias = true;
  const ParameterRegistry both(c);
  EXPECT_EQ(plain.find("layers.0.bq"), -1);
  EXPECT_EQ(plain.layer(0).bq, -1);
  EXPECT_EQ(qkv.find("layers.0.bo"), -1);
  const int64_t q = c.q_dim(), kv = c.kv_dim();
  EXPECT_EQ(qkv.total(), plain.total() + c.n_layers * (q + 2 * kv));
  EXPECT_EQ(both.total(), qkv.total() + c.n_layers * c.d_model);
  EXPECT_EQ(both.total(), c.parameter_count());
  const auto& L = both.layer(1);
  EXPECT_EQ(both.at("layers.1.bq").shape, std::vector<int64_t>{q});
  EXPECT_EQ(L.bk, L.bq + q);  // [bq | bk | bv] contiguous, as the fast path reads them
  EXPECT_EQ(L.bv, L.bk + kv);
  EXPECT_EQ(L.bv + kv, L.wo);
  EXPECT_EQ(L.bo, L.wo + q * c.d_model);
  const auto params = init_parameters(c, 3);
  for (int64_t i = 0; i < q; ++i) EXPECT_EQ(params[static_cast<size_t>(L.bq + i)], 0.0f);
}

// Each case edits a valid model.json; Model::load must refuse it as a format error naming the
// file, with every one of `parts` in its message.
class ModelJsonRefusal : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_ / "model";
    test::write_init_model(dir_, test::tiny_config());
    json_path_ = dir_ + "/model.json";
    original_ = test::read_file(json_path_);
  }

  void ExpectRefused(const std::function<void(ordered_json&)>& edit,
                     const std::vector<std::string>& parts) {
    test::write_file(json_path_, original_);
    test::edit_model_json(dir_, edit);
    ExpectLoadRefused(parts);
  }
  void ExpectRefusedText(const std::string& text, const std::vector<std::string>& parts) {
    test::write_file(json_path_, text);
    ExpectLoadRefused(parts);
  }
  void ExpectLoadRefused(const std::vector<std::string>& parts) {
    const Refusal r = test::load_refusal(dir_);
    ASSERT_TRUE(r.thrown) << "loaded a bad model.json";
    EXPECT_EQ(r.kind, ErrorKind::format) << r.message;
    EXPECT_EQ(r.message.rfind(json_path_ + ": ", 0), 0u) << "message does not start with the file: " << r.message;
    EXPECT_TRUE(HasAll(r.message, parts));
  }

  test::TempDir tmp_;
  std::string dir_, json_path_, original_;
};

TEST_F(ModelJsonRefusal, UnknownFormatVersionNamesBoth) {
  ExpectRefused([](ordered_json& j) { j["format_version"] = 3; },
                {"format_version 3 is not supported; this lockstep reads format_version 1 to 2"});
  ExpectRefused([](ordered_json& j) { j["format_version"] = 0; }, {"format_version 0 is not supported"});
  ExpectRefused([](ordered_json& j) { j["format_version"] = 18446744073709551615u; },
                {"format_version 18446744073709551615 is not supported", "reads format_version 1 to 2"});
  ExpectRefused([](ordered_json& j) { j["format_version"] = "1"; }, {"format_version is not an integer"});
  ExpectRefused([](ordered_json& j) { j.erase("format_version"); }, {"has no field 'format_version'"});
}

TEST_F(ModelJsonRefusal, UnknownProfileNamesBoth) {
  ExpectRefused([](ordered_json& j) { j["profile"] = "lockstep-f32-9"; },
                {"written for arithmetic profile 'lockstep-f32-9', which this lockstep does not compute (it computes '" +
                 std::string(profile_name()) + "', '" + int8dot_profile_name() + "' and " + "'" +
                 int8dot_k_profile_name() + "')"});
  // Version 1 had one profile.
  ExpectRefused(
      [](ordered_json& j) {
        j["format_version"] = 1;
        j["profile"] = int8dot_profile_name();
      },
      {"written for arithmetic profile 'lockstep-int8dot-1', but format_version 1 models compute 'lockstep-f32-1'"});
  // docs/FORMAT.md, "Profiles": the int8dot profile goes with a GGUF weights file, precision f32.
  ExpectRefused([](ordered_json& j) { j["profile"] = int8dot_profile_name(); },
                {"profile 'lockstep-int8dot-1' does not go with weights.format 'float32'"});
  ExpectRefused([](ordered_json& j) { j["profile"] = int8dot_k_profile_name(); },
                {"profile 'lockstep-int8dot-2' does not go with weights.format 'float32'"});
  ExpectRefused([](ordered_json& j) { j["weights"]["format"] = "gguf"; },
                {"profile 'lockstep-f32-1' does not go with weights.format 'gguf'"});
  ExpectRefused(
      [](ordered_json& j) {
        j["profile"] = int8dot_profile_name();
        j["weights"]["format"] = "gguf";
        j["precision"] = "bf16";
      },
      {"profile 'lockstep-int8dot-1' computes under precision f32 only, not 'bf16'"});
}

// A version-1 model.json (every model written before version 2) still loads, as the f32 profile,
// with the same parameters; the profile is the model's own.
TEST_F(ModelJsonRefusal, VersionOneStillLoads) {
  const std::shared_ptr<const Model> v2 = Model::load(dir_);
  test::edit_model_json(dir_, [](ordered_json& j) { j["format_version"] = 1; });
  const std::shared_ptr<const Model> v1 = Model::load(dir_);
  EXPECT_STREQ(v1->profile(), profile_name());
  EXPECT_STREQ(v2->profile(), profile_name());
  EXPECT_EQ(v1->parameters_sha256(), v2->parameters_sha256());
  EXPECT_EQ(find_profile("lockstep-int8dot-1"), int8dot_profile_name());
  EXPECT_EQ(find_profile("lockstep-int8dot-2"), int8dot_k_profile_name());
  EXPECT_EQ(find_profile("lockstep-q8_0-1"), nullptr);
}

TEST_F(ModelJsonRefusal, WrongFormatNameOrArchitecture) {
  ExpectRefused([](ordered_json& j) { j["format"] = "gguf"; }, {"format 'gguf' is not a lockstep model"});
  ExpectRefused([](ordered_json& j) { j["architecture"] = "encoder"; },
                {"architecture 'encoder' is not one lockstep runs"});
}

TEST_F(ModelJsonRefusal, WrongMatrixLayout) {
  ExpectRefused([](ordered_json& j) { j["matrix_layout"] = "out_in"; },
                {"matrix_layout 'out_in' is not supported; lockstep stores 'in_out'"});
  ExpectRefused([](ordered_json& j) { j.erase("matrix_layout"); }, {"has no field 'matrix_layout'"});
}

TEST_F(ModelJsonRefusal, BadPrecision) {
  ExpectRefused([](ordered_json& j) { j["precision"] = "f16"; }, {"unknown precision 'f16'"});
  ExpectRefused([](ordered_json& j) { j["precision"] = 16; }, {"model.json.precision is not a string"});
  EXPECT_EQ(test::load_refusal(dir_).message, json_path_ + ": model.json.precision is not a string");  // named once
}

TEST_F(ModelJsonRefusal, BadConfigValues) {
  ExpectRefused([](ordered_json& j) { j["config"]["n_heads"] = 3; },
                {"d_model = 16 is not a multiple of n_heads = 3"});
  ExpectRefused([](ordered_json& j) { j["config"]["n_kv_heads"] = 3; },
                {"n_kv_heads = 3 is outside [1, 2]"});
  ExpectRefused([](ordered_json& j) { j["config"]["vocab_size"] = 0; }, {"vocab_size = 0 is outside"});
  ExpectRefused([](ordered_json& j) { j["config"]["norm_eps"] = 0; },
                {"norm_eps must be a positive finite number"});
  ExpectRefused([](ordered_json& j) { j["config"]["d_ff"] = 40.5; }, {"config.d_ff is not an integer"});
  ExpectRefused([](ordered_json& j) { j["config"]["rope_theta"] = "1e4"; }, {"config.rope_theta is not a number"});
  ExpectRefused([](ordered_json& j) { j["config"].erase("batch"); }, {"config has no field 'batch'"});
  ExpectRefused([](ordered_json& j) { j["config"] = 16; }, {"config is not a JSON object"});
}

TEST_F(ModelJsonRefusal, BadBiasOrRopeScaling) {
  ExpectRefused([](ordered_json& j) { j["config"]["qkv_bias"] = 1; }, {"config.qkv_bias is not a boolean"});
  ExpectRefused([](ordered_json& j) { j["config"]["o_bias"] = "yes"; }, {"config.o_bias is not a boolean"});
  // A bias the parameter list does not have.
  ExpectRefused([](ordered_json& j) { j["config"]["qkv_bias"] = true; }, {"parameters must list the"});
  const ordered_json good = lockstep::format::parse_ordered_json(
      R"({"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192})");
  ExpectRefused([](ordered_json& j) { j["config"]["rope_scaling"] = 2; }, {"config.rope_scaling is not a JSON object"});
  ExpectRefused([&](ordered_json& j) { j["config"]["rope_scaling"] = good; j["config"]["rope_scaling"]["type"] = "yarn"; },
                {"config.rope_scaling.type is \"yarn\""});
  ExpectRefused([&](ordered_json& j) { j["config"]["rope_scaling"] = good; j["config"]["rope_scaling"]["beta"] = 1; },
                {"config.rope_scaling has an unknown field 'beta'"});
  ExpectRefused([&](ordered_json& j) { j["config"]["rope_scaling"] = good; j["config"]["rope_scaling"].erase("factor"); },
                {"no field 'factor'"});
  ExpectRefused([&](ordered_json& j) { j["config"]["rope_scaling"] = good; j["config"]["rope_scaling"]["factor"] = 0.5; },
                {"rope_scaling.factor must be a finite number >= 1"});
  ExpectRefused([&](ordered_json& j) { j["config"]["rope_scaling"] = good; j["config"]["rope_scaling"]["high_freq_factor"] = 1.0; },
                {"rope_scaling.high_freq_factor must be a finite number > low_freq_factor"});
}

TEST_F(ModelJsonRefusal, ConfigValuesOutOfRangeAreNamedAsWritten) {
  ExpectRefused([](ordered_json& j) { j["config"]["length"] = 4294967312; },
                {"config.length = 4294967312 is out of range"});
  // Above INT64_MAX: must not wrap to a negative (or a plausible) number.
  ExpectRefused([](ordered_json& j) { j["config"]["vocab_size"] = 18446744073709551615u; },
                {"config.vocab_size = 18446744073709551615 is out of range"});
  ExpectRefused([](ordered_json& j) { j["config"]["norm_eps"] = 1e300; },
                {"config.norm_eps = 1e+300 is outside the range of f32"});
  ExpectRefused([](ordered_json& j) { j["config"]["rope_theta"] = -1e39; },
                {"config.rope_theta = -1e+39 is outside the range of f32"});
  // FLT_MAX written with nine digits is a double a little above FLT_MAX that rounds to it;
  // half an ulp further it rounds to infinity.
  ExpectRefused([](ordered_json& j) { j["config"]["rope_theta"] = 3.4028236e38; },
                {"config.rope_theta = 3.4028236e+38 is outside the range of f32"});
}

TEST_F(ModelJsonRefusal, ParameterListNotMatching) {
  ExpectRefused([](ordered_json& j) { j["parameters"][1]["shape"] = {17}; },
                {"parameters[1] is", "expected {\"name\":\"layers.0.attn_norm\",\"offset\":4096,\"shape\":[16]}"});
  ExpectRefused([](ordered_json& j) { j["parameters"].erase(j["parameters"].size() - 1); },
                {"parameters must list the 21 tensors of the registry"});
  ExpectRefused([](ordered_json& j) { std::swap(j["parameters"][3], j["parameters"][4]); },
                {"parameters[3] is"});
  ExpectRefused([](ordered_json& j) { j["parameter_count"] = 1; }, {"parameter_count is not "});
}

TEST_F(ModelJsonRefusal, InputsOrOutputsNotMatching) {
  ExpectRefused([](ordered_json& j) { j["inputs"][0]["shape"] = {1, 17}; },
                {"inputs do not match the configuration: expected [{\"dtype\":\"i32\""});
  ExpectRefused([](ordered_json& j) { j["inputs"][0]["dtype"] = "i64"; }, {"inputs do not match"});
  ExpectRefused([](ordered_json& j) { j["outputs"][1]["name"] = "hidden_state"; },
                {"outputs do not match the configuration"});
  ExpectRefused([](ordered_json& j) { j["outputs"].erase(1); }, {"outputs do not match"});
}

TEST_F(ModelJsonRefusal, BadWeightsEntry) {
  ExpectRefused([](ordered_json& j) { j["weights"]["file"] = "../params.safetensors"; },
                {"weights.file '../params.safetensors' must be a plain file name in the model directory"});
  ExpectRefused([](ordered_json& j) { j["weights"]["format"] = "int4"; },
                {"weights.format 'int4' is not one this lockstep reads"});
  ExpectRefused([](ordered_json& j) { j["weights"]["parameters_sha256"] = "ABC"; },
                {"weights.parameters_sha256 is not 64 lower-case hex digits"});
  ExpectRefused([](ordered_json& j) { j["weights"] = "params.safetensors"; }, {"weights is not a JSON object"});
  ExpectRefused([](ordered_json& j) { j["weights_averaged"] = 0; }, {"weights_averaged is not true or false"});
  ExpectRefused([](ordered_json& j) { j["trained_weights"] = {{"file", "t.safetensors"}}; },
                {"trained_weights has no field 'format'"});
}

TEST_F(ModelJsonRefusal, BadCheckpoint) {
  ExpectRefused([](ordered_json& j) { j["checkpoint"] = {{"step", -1}}; },
                {"checkpoint.step is not a non-negative integer"});
  ExpectRefused([](ordered_json& j) { j["checkpoint"] = {{"slug", 3}}; }, {"checkpoint.slug is not a string"});
  ExpectRefused([](ordered_json& j) { j["checkpoint"] = "step-1"; }, {"checkpoint is neither null nor an object"});
}

TEST_F(ModelJsonRefusal, NestedTooDeep) {
  // 100,000 nested arrays in a field lockstep ignores: refused before parsing, not a crash.
  ExpectRefusedText("{\"note\": " + std::string(100000, '[') + std::string(100000, ']') + ", " + original_.substr(1),
                    {"JSON nested deeper than 64 arrays and objects (at byte 72)"});
}

TEST_F(ModelJsonRefusal, NotJson) {
  ExpectRefusedText("{\"format\": \"lockstep.model\",", {"not valid JSON"});
  ExpectRefusedText("", {"not valid JSON"});
  ExpectRefusedText("[1, 2]", {"not a JSON object"});
  ExpectRefusedText(std::string("{\"format\": \"\xff\"}"), {"not valid JSON"});
}

TEST(ModelJson, ParseNamesWhatItWasGiven) {
  try {
    format::parse_model_json("{}", "somewhere/model.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "somewhere/model.json: model.json has no field 'format'");
  }
}

}  // namespace
}  // namespace lockstep
