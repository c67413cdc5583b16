// params.safetensors: the round trip through a model directory, the file's standard layout, and
// every malformed variant the loader must refuse with its own message.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/sha256.hpp"
#include "format/format_fixtures.hpp"
#include "format/json_text.hpp"
#include "format/model_json.hpp"
#include "format/safetensors.hpp"
#include "format/weights.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using nlohmann::ordered_json;
using test::HasAll;
using test::Refusal;

uint64_t read_u64_le(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(bytes[at + static_cast<size_t>(i)]);
  return v;
}

void put_u64_le(std::string& bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[at + static_cast<size_t>(i)] = static_cast<char>(v >> (8 * i));
}

std::span<const uint8_t> as_bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// ---------------------------------------------------------------------------------------------
// Round trip

TEST(FormatRoundTrip, WriteThenLoadGivesTheSameBits) {
  for (const ModelConfig& config : {test::tiny_config(), test::tiny_gqa_config(8)}) {
    test::TempDir tmp;
    const std::string dir = tmp / "model";
    const std::vector<float> params = test::write_init_model(dir, config, 1234);

    LoadOptions options;
    options.threads = 1;
    const auto model = Model::load(dir, options);
    ASSERT_EQ(model->parameters().size(), params.size());
    EXPECT_EQ(std::memcmp(model->parameters().data(), params.data(), params.size() * sizeof(float)), 0);
    EXPECT_EQ(model->parameters_sha256(), sha256_f32_le(params));
    EXPECT_EQ(model->config(), config);
    EXPECT_EQ(model->precision(), Precision::f32);
    EXPECT_EQ(model->weight_format(), "float32");
    EXPECT_EQ(model->source().directory, dir);
    EXPECT_FALSE(model->source().step.has_value());
    EXPECT_FALSE(model->source().slug.has_value());

    // model.json holds the same digest, and parsing then rendering it gives back its text.
    const std::string json_text = test::read_file(dir + "/model.json");
    const format::ModelDescription d = format::parse_model_json(json_text, "model.json");
    EXPECT_EQ(d.weights.sha256, sha256_f32_le(params));
    EXPECT_EQ(d.weights.file, "params.safetensors");
    EXPECT_EQ(format::render_model_json(d), json_text);
  }
}

TEST(FormatRoundTrip, MetadataSurvives) {
  test::TempDir tmp;
  const ModelConfig config = test::tiny_config();
  const std::vector<float> params = init_parameters(config, 5);
  ModelMetadata meta;
  meta.precision = Precision::bf16;
  meta.source.step = 200;
  meta.source.slug = "tiny-run";
  meta.source.checkpoint = "/runs/tiny/step-00000200";
  meta.source.directory = "/ignored";
  write_model_directory(tmp / "m", config, params, meta);

  LoadOptions options;
  options.threads = 1;
  const auto model = Model::load(tmp / "m", options);
  EXPECT_EQ(model->precision(), Precision::bf16);
  EXPECT_EQ(model->source().step, 200);
  EXPECT_EQ(model->source().slug, "tiny-run");
  EXPECT_EQ(model->source().checkpoint, "/runs/tiny/step-00000200");
  EXPECT_EQ(model->source().directory, tmp / "m");
  EXPECT_TRUE(test::same_bits(model->parameters(), params));
}

// The file is standard safetensors, read here without lockstep's parser: an 8-byte LE header
// length, a JSON header, data 64-byte aligned, each tensor F32 little-endian at the registry's
// shape, in registry order with contiguous offsets, so the data section is the flat vector.
TEST(FormatRoundTrip, WeightsFileIsStandardSafetensors) {
  test::TempDir tmp;
  const ModelConfig config = test::tiny_gqa_config();
  const std::vector<float> params = test::write_init_model(tmp / "m", config, 99);
  const std::string bytes = test::read_file(tmp / "m/params.safetensors");
  const ParameterRegistry registry(config);

  ASSERT_GE(bytes.size(), 8u);
  const uint64_t n = read_u64_le(bytes, 0);
  ASSERT_LE(n, bytes.size() - 8);
  EXPECT_EQ((8 + n) % 64, 0u) << "data section not 64-byte aligned";
  const std::string header_text = bytes.substr(8, n);
  EXPECT_EQ(header_text.front(), '{');
  const nlohmann::json header = lockstep::format::parse_json(header_text);
  ASSERT_TRUE(header.is_object());
  EXPECT_EQ(header.size(), registry.entries().size() + 1);  // + __metadata__
  EXPECT_EQ(header.at("__metadata__"),
            (nlohmann::json{{"format", "lockstep"}, {"matrix_layout", "in_out"}}));

  uint64_t cursor = 0;
  for (const auto& e : registry.entries()) {
    SCOPED_TRACE(e.name);
    ASSERT_TRUE(header.contains(e.name));
    const auto& t = header.at(e.name);
    EXPECT_EQ(t.at("dtype"), "F32");
    EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), e.shape);
    const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
    ASSERT_EQ(offsets.size(), 2u);
    EXPECT_EQ(offsets[0], cursor);
    EXPECT_EQ(offsets[0], static_cast<uint64_t>(e.offset) * 4);
    EXPECT_EQ(offsets[1] - offsets[0], static_cast<uint64_t>(e.count) * 4);
    cursor = offsets[1];
  }
  EXPECT_EQ(cursor, params.size() * 4);
  ASSERT_EQ(bytes.size(), 8 + n + cursor);
  // Little-endian f32 on this (x86/ARM little-endian) host: the bytes are the floats' bytes.
  EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, params.data(), cursor), 0);
  // Matrices are [in, out]: wq of layer 0 is [d_model, q_dim].
  EXPECT_EQ(registry.at("layers.0.wq").shape, (std::vector<int64_t>{config.d_model, config.q_dim()}));
  EXPECT_EQ(registry.at("layers.0.wk").shape, (std::vector<int64_t>{config.d_model, config.kv_dim()}));
  EXPECT_EQ(registry.at("head").shape, (std::vector<int64_t>{config.d_model, config.vocab_size}));
}

// Another tool may write the tensors in any data order; the reader goes by the offsets.
TEST(FormatRoundTrip, ReadsTensorsStoredInAnotherOrder) {
  test::TempDir tmp;
  const ModelConfig config = test::tiny_config();
  const std::vector<float> params = test::write_init_model(tmp / "m", config);
  const ParameterRegistry registry(config);
  test::edit_safetensors(tmp / "m", [&](ordered_json& header, std::string& data) {
    std::string reordered;
    for (auto it = registry.entries().rbegin(); it != registry.entries().rend(); ++it) {
      const uint64_t begin = reordered.size();
      reordered.append(reinterpret_cast<const char*>(params.data() + it->offset),
                       static_cast<size_t>(it->count) * 4);
      header[it->name]["data_offsets"] = {begin, reordered.size()};
    }
    data = reordered;
  });
  LoadOptions options;
  options.threads = 1;
  EXPECT_TRUE(test::same_bits(Model::load(tmp / "m", options)->parameters(), params));
}

TEST(FormatWrite, RefusesNonFiniteParameters) {
  test::TempDir tmp;
  const ModelConfig config = test::tiny_config();
  std::vector<float> params = init_parameters(config, 1);
  const int64_t at = ParameterRegistry(config).at("layers.1.w_up").offset + 5;
  params[static_cast<size_t>(at)] = std::numeric_limits<float>::quiet_NaN();
  try {
    write_model_directory(tmp / "m", config, params, {});
    FAIL() << "a NaN parameter was written";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_TRUE(HasAll(e.what(), {"layers.1.w_up", "non-finite", "element 5"}));
  }
  EXPECT_EQ(test::list_directory(tmp.path()), std::vector<std::string>{});
}

// ---------------------------------------------------------------------------------------------
// Malformed files, refused by Model::load with a message naming the file and the problem

class Malformed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_ / "model";
    params_ = test::write_init_model(dir_, config_);
    path_ = dir_ + "/params.safetensors";
    bytes_ = test::read_file(path_);
  }

  // Loads the model expecting a format refusal whose message names the weights file and holds
  // every one of `parts`.
  void ExpectRefused(const std::vector<std::string>& parts) {
    const Refusal r = test::load_refusal(dir_);
    ASSERT_TRUE(r.thrown) << "loaded a malformed file";
    EXPECT_EQ(r.kind, ErrorKind::format) << r.message;
    EXPECT_EQ(r.message.rfind(path_ + ": ", 0), 0u) << "message does not start with the file: " << r.message;
    EXPECT_TRUE(HasAll(r.message, parts));
  }

  void Edit(const std::function<void(ordered_json&, std::string&)>& edit) {
    test::edit_safetensors(dir_, edit);
  }
  void WriteBytes(const std::string& bytes) { test::write_file(path_, bytes); }

  // Offsets of a registry tensor as the file gives them.
  static std::pair<uint64_t, uint64_t> offsets(const ordered_json& header, const std::string& name) {
    const auto& o = header.at(name).at("data_offsets");
    return {o[0].get<uint64_t>(), o[1].get<uint64_t>()};
  }
  size_t float_byte(const std::string& name, int64_t element) const {
    return static_cast<size_t>(ParameterRegistry(config_).at(name).offset + element) * 4;
  }

  test::TempDir tmp_;
  ModelConfig config_ = test::tiny_config();
  std::string dir_, path_, bytes_;
  std::vector<float> params_;
};

TEST_F(Malformed, ShorterThanTheHeaderLength) {
  WriteBytes(bytes_.substr(0, 5));
  ExpectRefused({"truncated: 5 bytes, fewer than the 8-byte header length"});
  WriteBytes("");
  ExpectRefused({"truncated: 0 bytes"});
}

TEST_F(Malformed, DataCutShort) {
  WriteBytes(bytes_.substr(0, bytes_.size() - 6));
  ExpectRefused({"tensor 'head' ends at byte", "past the", "-byte data section"});
}

TEST_F(Malformed, HeaderLengthPastTheEnd) {
  put_u64_le(bytes_, 0, bytes_.size() - 7);
  WriteBytes(bytes_);
  ExpectRefused({"header length " + std::to_string(bytes_.size() - 7) + " runs past the end of the " +
                 std::to_string(bytes_.size()) + "-byte file"});
}

TEST_F(Malformed, HeaderLengthOverTheCap) {
  put_u64_le(bytes_, 0, uint64_t{1} << 40);
  WriteBytes(bytes_);
  ExpectRefused({"header length 1099511627776 is over the limit of 67108864 bytes"});
  put_u64_le(bytes_, 0, ~uint64_t{0});
  WriteBytes(bytes_);
  ExpectRefused({"header length 18446744073709551615 is over the limit"});
}

TEST_F(Malformed, HeaderNestedTooDeep) {
  test::SafetensorsFile f = test::split_safetensors(bytes_);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  WriteBytes(test::join_safetensors("{\"__metadata__\": {\"note\": " + deep + "}, " + f.header_text.substr(1), f.data));
  ExpectRefused({"header: JSON nested deeper than 64 arrays and objects (at byte 88)"});
}

TEST_F(Malformed, HeaderIsNotValidJson) {
  test::SafetensorsFile f = test::split_safetensors(bytes_);
  const size_t colon = f.header_text.find(':');
  ASSERT_NE(colon, std::string::npos);
  f.header_text[colon] = ';';  // same length: the data does not move
  WriteBytes(test::join_safetensors(f.header_text, f.data));
  ExpectRefused({"header is not valid JSON"});
  // Cut inside the JSON: the header is the first half of the object.
  f = test::split_safetensors(bytes_);
  WriteBytes(test::join_safetensors(f.header_text.substr(0, f.header_text.size() / 2), f.data));
  ExpectRefused({"header is not valid JSON"});
}

TEST_F(Malformed, HeaderIsNotAnObject) {
  const std::string data = test::split_safetensors(bytes_).data;
  WriteBytes(test::join_safetensors("[1, 2, 3]", data));
  ExpectRefused({"header does not start with a JSON object"});
  WriteBytes(test::join_safetensors(R"("a string")", data));
  ExpectRefused({"header does not start with a JSON object"});
  std::string one(8, '\0');
  put_u64_le(one, 0, 1);
  WriteBytes(one + "{");
  ExpectRefused({"header of 1 bytes is not a JSON object"});
}

TEST_F(Malformed, OverlappingOffsets) {
  Edit([](ordered_json& h, std::string&) {
    const auto [b, e] = offsets(h, "layers.0.wq");
    h["layers.0.wq"]["data_offsets"] = {b - 4, e - 4};
  });
  ExpectRefused({"tensor 'layers.0.wq' overlaps the tensor before it"});
}

TEST_F(Malformed, GapBetweenTensors) {
  Edit([](ordered_json& h, std::string&) {
    const auto [b, e] = offsets(h, "layers.0.wq");
    h["layers.0.wq"]["data_offsets"] = {b + 8, e + 8};
  });
  ExpectRefused({"gap of 8 bytes before tensor 'layers.0.wq'"});
}

TEST_F(Malformed, TrailingBytes) {
  WriteBytes(bytes_ + std::string(12, '\0'));
  ExpectRefused({"12 bytes after the last tensor belong to none"});
}

TEST_F(Malformed, UnknownDtype) {
  Edit([](ordered_json& h, std::string&) { h["final_norm"]["dtype"] = "F33"; });
  ExpectRefused({"tensor 'final_norm' has an unknown dtype 'F33'"});
  Edit([](ordered_json& h, std::string&) { h["final_norm"]["dtype"] = 4; });
  ExpectRefused({"tensor 'final_norm' has no dtype string"});
}

TEST_F(Malformed, ParameterNotF32) {
  // I32 has F32's width, so the file is well formed; the parameter's dtype is what is wrong.
  Edit([](ordered_json& h, std::string&) { h["embed"]["dtype"] = "I32"; });
  ExpectRefused({"parameter 'embed' is I32, expected F32"});
}

TEST_F(Malformed, ShapeTimesWidthIsNotTheSpan) {
  Edit([&](ordered_json& h, std::string&) { h["final_norm"]["shape"] = {config_.d_model - 1}; });
  ExpectRefused({"tensor 'final_norm': shape x dtype width is 60 bytes but data_offsets span 64"});
  // The same span under a wider dtype.
  Edit([&](ordered_json& h, std::string&) {
    h["final_norm"]["shape"] = {config_.d_model - 1};
    h["final_norm"]["dtype"] = "F64";
  });
  ExpectRefused({"tensor 'final_norm': shape x dtype width is 120 bytes but data_offsets span 64"});
}

TEST_F(Malformed, ShapeOfTheWrongParameterShape) {
  // [d_ff, d_model] instead of [d_model, d_ff]: the same span, the transposed layout.
  Edit([&](ordered_json& h, std::string&) { h["layers.0.w_gate"]["shape"] = {config_.d_ff, config_.d_model}; });
  ExpectRefused({"parameter 'layers.0.w_gate' has shape [40, 16], expected [16, 40]"});
}

TEST_F(Malformed, ShapeEntriesThatAreNotCounts) {
  for (const ordered_json& bad : {ordered_json(-16), ordered_json(16.5), ordered_json("16"),
                                  ordered_json(nullptr)}) {
    Edit([&](ordered_json& h, std::string&) { h["final_norm"]["shape"] = ordered_json::array({bad}); });
    SCOPED_TRACE(bad.dump());
    ExpectRefused({"tensor 'final_norm' has a shape entry that is not a non-negative integer"});
  }
  Edit([](ordered_json& h, std::string&) { h["final_norm"]["shape"] = 16; });
  ExpectRefused({"tensor 'final_norm' has no shape list"});
}

TEST_F(Malformed, BadDataOffsets) {
  Edit([](ordered_json& h, std::string&) {
    const auto [b, e] = offsets(h, "final_norm");
    h["final_norm"]["data_offsets"] = {e, b};
  });
  ExpectRefused({"tensor 'final_norm' has data_offsets that end before they begin"});
  Edit([](ordered_json& h, std::string&) { h["final_norm"]["data_offsets"] = {0}; });
  ExpectRefused({"tensor 'final_norm' has no data_offsets pair"});
  Edit([](ordered_json& h, std::string&) { h["final_norm"]["data_offsets"] = {-4, 60}; });
  ExpectRefused({"tensor 'final_norm' has data_offsets that are not non-negative integers"});
}

TEST_F(Malformed, NonFiniteWeights) {
  const struct {
    float value;
    const char* text;
  } cases[] = {{std::numeric_limits<float>::quiet_NaN(), "(nan)"},
               {std::numeric_limits<float>::infinity(), "(inf)"},
               {-std::numeric_limits<float>::infinity(), "(-inf)"}};
  for (const auto& c : cases) {
    std::string bytes = bytes_;
    const size_t data = 8 + read_u64_le(bytes, 0);
    std::memcpy(&bytes[data + float_byte("layers.1.wv", 3)], &c.value, 4);
    WriteBytes(bytes);
    SCOPED_TRACE(c.text);
    ExpectRefused({"parameter 'layers.1.wv' holds a non-finite value " + std::string(c.text) +
                   " at element 3"});
  }
}

TEST_F(Malformed, DuplicateTensorName) {
  // nlohmann keeps one of two equal keys, so the duplicate is spliced into the text.
  test::SafetensorsFile f = test::split_safetensors(bytes_);
  std::string text = f.header_text;
  while (text.back() == ' ') text.pop_back();
  ASSERT_EQ(text.back(), '}');
  text.pop_back();
  text += R"(,"embed":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})";
  WriteBytes(test::join_safetensors(text, f.data));
  ExpectRefused({"tensor name 'embed' appears twice"});
}

TEST_F(Malformed, MissingParameter) {
  // head is the last tensor in the data: drop it and its bytes.
  Edit([](ordered_json& h, std::string& data) {
    const auto [b, e] = offsets(h, "head");
    ASSERT_EQ(e, data.size());
    data.resize(b);
    h.erase("head");
  });
  ExpectRefused({"parameter 'head' is missing"});
}

TEST_F(Malformed, UnknownExtraTensor) {
  Edit([](ordered_json& h, std::string& data) {
    const uint64_t end = data.size();
    data.append(8, '\0');
    h["extra"] = {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {end, end + 8}}};
  });
  ExpectRefused({"tensor 'extra' is not a parameter of this model"});
}

TEST_F(Malformed, UnknownTensorField) {
  Edit([](ordered_json& h, std::string&) { h["final_norm"]["layout"] = "in_out"; });
  ExpectRefused({"tensor 'final_norm' has an unknown field 'layout'"});
}

TEST_F(Malformed, BadMetadata) {
  Edit([](ordered_json& h, std::string&) { h["__metadata__"] = {{"format", 1}}; });
  ExpectRefused({"__metadata__ value 'format' is not a string"});
  Edit([](ordered_json& h, std::string&) { h["__metadata__"] = "lockstep"; });
  ExpectRefused({"__metadata__ is not a JSON object"});
}

TEST_F(Malformed, WrongSha256) {
  // One mantissa bit of one weight: still finite, still the right shape, another digest.
  std::string bytes = bytes_;
  const size_t at = 8 + read_u64_le(bytes, 0) + float_byte("layers.0.wo", 7);
  bytes[at] = static_cast<char>(bytes[at] ^ 1);
  WriteBytes(bytes);
  ExpectRefused({"parameters' SHA-256 is ", " but model.json says " + sha256_f32_le(params_)});
}

TEST_F(Malformed, Sha256InModelJsonChanged) {
  const std::string zeros(64, '0');
  test::edit_model_json(dir_, [&](ordered_json& j) { j["weights"]["parameters_sha256"] = zeros; });
  ExpectRefused({"parameters' SHA-256 is " + sha256_f32_le(params_) + " but model.json says " + zeros});
}

TEST_F(Malformed, WeightsFileMissingOrNotAFile) {
  ASSERT_EQ(::unlink(path_.c_str()), 0);
  Refusal r = test::load_refusal(dir_);
  ASSERT_TRUE(r.thrown);
  EXPECT_EQ(r.kind, ErrorKind::io);
  EXPECT_TRUE(HasAll(r.message, {path_, "cannot open"}));
  ASSERT_EQ(::mkdir(path_.c_str(), 0755), 0);
  r = test::load_refusal(dir_);
  ASSERT_TRUE(r.thrown);
  EXPECT_TRUE(HasAll(r.message, {path_, "not a regular file"}));
}

// ---------------------------------------------------------------------------------------------
// parse_safetensors alone: cases a model's file cannot reach

format::SafetensorsHeader parse_text(const std::string& header_text, const std::string& data = "") {
  const std::string bytes = test::join_safetensors(header_text, data);
  return format::parse_safetensors(as_bytes(bytes), "t.safetensors");
}

std::string parse_error(const std::string& header_text, const std::string& data = "") {
  try {
    parse_text(header_text, data);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::format);
    return e.what();
  }
  ADD_FAILURE() << "parsed: " << header_text;
  return "";
}

TEST(ParseSafetensors, ReturnsTensorsInDataOrderWithMetadata) {
  const auto h = parse_text(
      R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},)"
      R"("a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"U8","shape":[0,5],"data_offsets":[14,14]},)"
      R"("__metadata__":{"k":"v"}})",
      std::string(14, 'x'));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");
  EXPECT_EQ(h.tensors[0].dtype, format::DType::i64);
  EXPECT_EQ(h.tensors[1].name, "b");
  EXPECT_EQ(h.tensors[1].shape, std::vector<int64_t>{3});
  EXPECT_EQ(h.tensors[2].name, "e");
  EXPECT_EQ(h.tensors[2].begin, 14u);
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"k", "v"}}));
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.data_size, 14u);
}

TEST(ParseSafetensors, ShapeWhoseByteCountWouldWrapIsRefused) {
  // 2^61 F64 elements are 2^64 bytes, which wraps to 0 in 64 bits and would match [0, 0].
  EXPECT_TRUE(HasAll(parse_error(R"({"x":{"dtype":"F64","shape":[2305843009213693952],"data_offsets":[0,0]}})"),
                     {"t.safetensors: tensor 'x' has a shape too large to address"}));
  // A zero dimension first does not let a huge one through.
  EXPECT_TRUE(HasAll(parse_error(R"({"x":{"dtype":"U8","shape":[0,18446744073709551615],"data_offsets":[0,0]}})"),
                     {"tensor 'x' has a shape too large to address"}));
  EXPECT_TRUE(HasAll(parse_error(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"),
                     {"tensor 'x' has a shape too large to address"}));
}

TEST(ParseSafetensors, OtherRefusals) {
  EXPECT_TRUE(HasAll(parse_error(R"({"":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", "abcd"),
                     {"a tensor has an empty name"}));
  EXPECT_TRUE(HasAll(parse_error(R"({"x":[1]})"), {"tensor 'x' is not a JSON object"}));
  EXPECT_TRUE(HasAll(parse_error(R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})", "abcd"),
                     {"tensor 'x' has 9 dimensions"}));
  EXPECT_TRUE(HasAll(parse_error(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "ab"),
                     {"tensor 'x' ends at byte 4, past the 2-byte data section"}));
  // A control character in a name is not echoed raw.
  EXPECT_TRUE(HasAll(parse_error(R"({"a\nb":{"dtype":"X","shape":[],"data_offsets":[0,0]}})"),
                     {"tensor 'a?b' has an unknown dtype 'X'"}));
  // Two equal __metadata__ keys are a duplicate too.
  EXPECT_TRUE(HasAll(parse_error(R"({"__metadata__":{},"__metadata__":{}})"),
                     {"tensor name '__metadata__' appears twice"}));
}

TEST(ParseSafetensors, AcceptsAnEmptyFile) {
  const auto h = parse_text("{}");
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_EQ(h.data_size, 0u);
}

TEST(ParseSafetensors, WriterOutputParses) {
  test::TempDir tmp;
  const float values[6] = {1, 2, 3, 4, 5, 6};
  const int32_t ids[2] = {7, -8};
  const format::TensorData tensors[] = {{"w", format::DType::f32, {2, 3}, values},
                                        {"ids", format::DType::i32, {2}, ids}};
  format::write_safetensors(tmp / "x.safetensors", tensors, {{"k", "v"}});
  const std::string bytes = test::read_file(tmp / "x.safetensors");
  const auto h = format::parse_safetensors(as_bytes(bytes), "x");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.data_offset % 64, 0u);
  EXPECT_EQ(h.tensors[0].name, "w");
  EXPECT_EQ(h.tensors[1].name, "ids");
  EXPECT_EQ(std::memcmp(bytes.data() + h.data_offset, values, sizeof(values)), 0);
  EXPECT_EQ(std::memcmp(bytes.data() + h.data_offset + 24, ids, sizeof(ids)), 0);
  EXPECT_EQ(h.metadata.at("k"), "v");
}

}  // namespace
}  // namespace lockstep
