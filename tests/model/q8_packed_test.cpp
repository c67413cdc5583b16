// A q8 model (weights.format "q8") computes from its int8 weights kept packed, and its outputs
// are, with memcmp, those of its expanded f32 model: for every SIMD target this machine runs,
// thread counts 1, 2, 3 and 7, ragged batches, sessions (decode one token at a time) and calls
// through the prefix cache.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/sha256.hpp"
#include "format/atomic_write.hpp"
#include "format/model_json.hpp"
#include "format/weights.hpp"
#include "lockstep/call.hpp"
#include "lockstep/format.hpp"
#include "lockstep/model.hpp"
#include "lockstep/prefix_cache.hpp"
#include "lockstep/session.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"
#include "quant/q4.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

namespace fs = std::filesystem;

// Writes a q8 (or q4) model directory for `params` at `dir`; returns the expanded f32 parameters.
std::vector<float> write_q8_model(const std::string& dir, const ModelConfig& c, const std::vector<float>& params,
                                  const std::string& packing = "q8") {
  fs::create_directories(dir);
  const std::string file = dir + "/" + format::kWeightsFile;
  const std::vector<float> expanded = packing == "q4" ? format::write_weights_q4(file, c, params)
                                                       : format::write_weights_q8(file, c, params);
  format::ModelDescription d;
  d.config = c;
  d.profile = profile_name();
  d.weights = {format::kWeightsFile, packing, sha256_f32_le(expanded)};
  format::write_file_synced(dir + "/model.json", format::render_model_json(d));
  return expanded;
}

ModelConfig odd_config() {  // nothing a multiple of the vector width
  ModelConfig odd;
  odd.vocab_size = 37;
  odd.length = 23;
  odd.d_model = 30;
  odd.n_layers = 2;
  odd.n_heads = 5;
  odd.n_kv_heads = 1;
  odd.d_ff = 17;
  odd.batch = 2;
  return odd;
}

ModelConfig wide_config() {  // a vocab past several panels
  ModelConfig wide;
  wide.vocab_size = 300;
  wide.length = 40;
  wide.d_model = 68;
  wide.n_layers = 1;
  wide.n_heads = 2;
  wide.n_kv_heads = 2;
  wide.d_ff = 50;
  wide.batch = 2;
  return wide;
}

class Q8Packed : public ::testing::TestWithParam<std::string> {
 protected:
  test::TempDir tmp_;
  const std::string dir_ = tmp_.path();
  const std::string packing_ = GetParam();
  bool held(const simd::PackedMatrix& m) const { return packing_ == "q4" ? m.q4 : m.q8; }
};

TEST_P(Q8Packed, MatricesAreHeldAsInt8) {
  const ModelConfig c = test::tiny_config(24);
  write_q8_model(dir_ + "/m", c, init_parameters(c, 3), packing_);
  const auto model = Model::load(dir_ + "/m");
  const PackedWeights& pw = *model->impl().packed;
  EXPECT_TRUE(held(pw.head));
  for (const auto& l : pw.layers) {
    EXPECT_TRUE(held(l.qkv));
    EXPECT_TRUE(held(l.wo));
    EXPECT_TRUE(held(l.gate_up));
    EXPECT_TRUE(held(l.w_down));
  }
  // Under precision bf16 the weights are rounded, so they are packed from the floats.
  LoadOptions bf16;
  bf16.precision = Precision::bf16;
  EXPECT_FALSE(held(Model::load(dir_ + "/m", bf16)->impl().packed->head));
}

TEST_P(Q8Packed, LogitsEqualTheExpandedModelsOnEveryTargetThreadCountAndBatch) {
  int n = 0;
  for (const ModelConfig& c : {test::tiny_config(24), test::tiny_gqa_config(24), odd_config(), wide_config()}) {
    const std::string dir = dir_ + "/m" + std::to_string(n++);
    const auto expanded = write_q8_model(dir, c, init_parameters(c, 17), packing_);
    const auto f32 = Model::from_parameters(c, expanded);
    for (const std::string& target : test::targets_under_test()) {
      LoadOptions options;
      options.simd_target = target;
      const auto q8 = Model::load(dir, options);
      ASSERT_EQ(q8->parameters_sha256(), f32->parameters_sha256());
      for (int64_t B : {1, 2, 5}) {
        const int64_t T = c.length;
        const auto ids = test::random_ids(B * T, c.vocab_size, static_cast<uint64_t>(B * 31));
        std::vector<int32_t> lengths;
        for (int64_t b = 0; b < B; ++b)
          lengths.push_back(static_cast<int32_t>(1 + test::random_ids(1, static_cast<int32_t>(T), static_cast<uint64_t>(B * 100 + b))[0]));
        const auto want = f32->logits({ids.data(), B, T}, lengths, {Device::reference, std::nullopt});
        for (int threads : {1, 2, 3, 7}) {
          const auto got = q8->logits({ids.data(), B, T}, lengths, {Device::cpu, threads});
          ASSERT_TRUE(test::same_bits(got, want)) << dir << " " << target << " B=" << B << " threads=" << threads;
        }
      }
    }
  }
}

TEST_P(Q8Packed, HoldsNoF32CopyOfItsMatricesUntilAsked) {
  // The f32 pages of the packed matrices are given back at load (an f32 model's too, from its
  // f32 panels: resident_test.cpp); the reference path and parameters() expand them again, bit
  // for bit, and the fast path is unaffected.
  const ModelConfig c = wide_config();
  const auto expanded = write_q8_model(dir_ + "/m", c, init_parameters(c, 8), packing_);
  const auto f32 = Model::from_parameters(c, expanded);
  EXPECT_FALSE(f32->impl().released.empty());
  const auto ids = test::random_ids(c.length, c.vocab_size, 78);
  const auto want = f32->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt});
  for (const bool parameters_first : {false, true}) {
    const auto q8 = Model::load(dir_ + "/m");
    ASSERT_FALSE(q8->impl().released.empty());
    EXPECT_TRUE(test::same_bits(q8->logits({ids.data(), 1, c.length}, {}, {Device::cpu, 2}), want));
    if (parameters_first) {
      EXPECT_TRUE(test::same_bits(q8->parameters(), expanded));
      EXPECT_TRUE(test::same_bits(q8->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt}), want));
    } else {
      EXPECT_TRUE(test::same_bits(q8->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt}), want));
      EXPECT_TRUE(test::same_bits(q8->parameters(), expanded));
    }
    EXPECT_TRUE(test::same_bits(q8->logits({ids.data(), 1, c.length}, {}, {Device::cpu, 3}), want));
  }
}

TEST_P(Q8Packed, SessionsDecodeTheExpandedModelsBits) {
  const ModelConfig c = wide_config();
  const auto expanded = write_q8_model(dir_ + "/m", c, init_parameters(c, 5), packing_);
  const auto f32 = Model::from_parameters(c, expanded);
  const auto ids = test::random_ids(c.length, c.vocab_size, 77);
  const auto all = f32->logits({ids.data(), 1, c.length}, {}, {Device::reference, std::nullopt});
  for (const std::string& target : test::targets_under_test()) {
    LoadOptions options;
    options.simd_target = target;
    const auto q8 = Model::load(dir_ + "/m", options);
    for (int threads : {1, 2, 3, 7}) {
      Session s(q8, {Device::cpu, threads});
      s.append(std::span<const int32_t>(ids).subspan(0, 5));  // a prefill, then one token at a time
      for (int32_t pos = 5; pos < c.length; ++pos) {
        const auto logits = s.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(pos), 1));
        ASSERT_EQ(std::memcmp(logits.data(), all.data() + static_cast<size_t>(pos) * c.vocab_size,
                              static_cast<size_t>(c.vocab_size) * sizeof(float)),
                  0)
            << target << " threads=" << threads << " pos=" << pos;
      }
    }
  }
}

TEST_P(Q8Packed, PrefixCacheCallsEqualTheExpandedModelsAnswers) {
  const ModelConfig c = test::tiny_gqa_config(20);
  const auto expanded = write_q8_model(dir_ + "/m", c, init_parameters(c, 9), packing_);
  const auto f32 = Model::from_parameters(c, expanded);
  const auto q8 = Model::load(dir_ + "/m");
  const CallLayout layout(c, {"logits"}, true);
  PrefixCache cache(q8);
  const auto text = test::random_ids(c.length, c.vocab_size, 12);
  for (int32_t at = 0; at < c.length; ++at) {
    std::vector<uint8_t> input(static_cast<size_t>(c.length) * 4 + 4);
    std::memcpy(input.data(), text.data(), static_cast<size_t>(c.length) * 4);
    std::memcpy(input.data() + c.length * 4, &at, 4);
    std::vector<uint8_t> with(layout.output_bytes()), without(layout.output_bytes());
    std::vector<std::span<const uint8_t>> in{input};
    std::vector<std::span<uint8_t>> out_with{with}, out_without{without};
    run_calls(*q8, layout, in, out_with, {Device::cpu, 2}, &cache);
    run_calls(*f32, layout, in, out_without, {Device::reference, std::nullopt});
    ASSERT_EQ(with, without) << "at " << at;
  }
  EXPECT_GT(cache.stats().rows_reused, 0u);
}

TEST_P(Q8Packed, ExpansionEqualsAnIndependentNumPyExpansion) {
  // Odd shapes: K 17 and 30 (one partial group), 68 (two whole groups and a partial one), odd N.
  int n = 0;
  for (const ModelConfig& c : {odd_config(), wide_config()}) {
    const std::string dir = dir_ + "/m" + std::to_string(n++);
    const auto params = init_parameters(c, 4);
    write_q8_model(dir, c, params, packing_);
    format::write_weights(dir + "/f32.safetensors", c, params);
    const auto model = Model::load(dir);
    const auto check = test::run_command({LOCKSTEP_PYTHON, std::string(LOCKSTEP_SOURCE_DIR) + "/tests/train/" +
                                                               packing_ + "_numpy.py",
                                          dir + "/" + format::kWeightsFile, dir + "/f32.safetensors",
                                          model->parameters_sha256()});
    EXPECT_EQ(check.status, 0) << check.out << check.err;
  }
}

INSTANTIATE_TEST_SUITE_P(Packings, Q8Packed, ::testing::Values("q8", "q4"));

}  // namespace
}  // namespace lockstep

namespace lockstep {
namespace {

// A finite scale can still expand a matrix to infinities (127 x 3e38 overflows). Loading a model
// that keeps its matrices packed gives each matrix's expanded pages back once hashed; the check
// for non-finite values must see them before that. It used to run after, reading the pages as
// zeros: such a file was refused only because its digest no longer matched, and one whose
// model.json hashed the infinities loaded; reading the pages back also made them resident again.
TEST(Q8Format, LoadRefusesAScaleThatExpandsToInfinity) {
  for (const std::string packing : {"q8", "q4"}) {
    SCOPED_TRACE(packing);
    test::TempDir tmp;
    ModelConfig c = odd_config();
    c.d_model = 128;  // wo [128, 128]: whole pages, which the load gives back
    c.n_heads = 4;
    c.n_kv_heads = 2;
    write_q8_model(tmp.path() + "/m", c, init_parameters(c, 3), packing);
    const std::string file = tmp.path() + "/m/" + format::kWeightsFile;
    std::string bytes = test::read_file(file);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);  // little-endian u64, as x86 and Arm store it
    const auto header = nlohmann::json::parse(bytes.substr(8, header_bytes));
    // q8: every column's scale. q4: those of rows 32-63 only (its scales are [K / 32][N], N =
    // d_model), which lie on whole pages of the expanded matrix, where the old order read zeros.
    const auto& scale = header.at("layers.1.wo.scale").at("data_offsets");
    const uint64_t first = scale[0].get<uint64_t>(), end = scale[1].get<uint64_t>();
    const uint64_t row_group = static_cast<uint64_t>(c.d_model) * sizeof(float);
    const uint64_t from = packing == "q8" ? first : first + row_group;
    const uint64_t to = packing == "q8" ? end : first + 2 * row_group;
    ASSERT_LE(to, end);
    const float huge = 3e38f;
    for (uint64_t at = from; at < to; at += 4) std::memcpy(&bytes[8 + header_bytes + at], &huge, 4);
    test::write_file(file, bytes);
    try {
      (void)Model::load(tmp.path() + "/m");
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("parameter 'layers.1.wo' holds a non-finite value"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Q4Format, RefusesMinusEightAndNonZeroPadding) {
  // [2, 3]: two bytes a row, the second's high nibble padding.
  std::vector<uint8_t> good = {0x71, 0x09, 0xF2, 0x07};  // 1, 7, -7 / 2, -1, 7
  EXPECT_EQ(quant::check_q4(good.data(), 2, 3), "");
  std::vector<float> w(6);
  const std::vector<float> scale = {1.0f, 2.0f, 0.5f};
  quant::expand_q4(good.data(), scale.data(), 2, 3, w.data());
  EXPECT_EQ(w, (std::vector<float>{1.0f, 14.0f, -3.5f, 2.0f, -2.0f, 3.5f}));
  std::vector<uint8_t> minus8 = good;
  minus8[2] = 0x82;  // row 1, column 1 is -8
  EXPECT_NE(quant::check_q4(minus8.data(), 2, 3).find("value -8"), std::string::npos);
  std::vector<uint8_t> padding = good;
  padding[3] = 0x17;
  EXPECT_NE(quant::check_q4(padding.data(), 2, 3).find("padding"), std::string::npos);
}

TEST(Q4Format, PacksGroupsOf32RowsWithAPartialLastGroup) {
  // K 33: rows 0..31 share a scale per column, row 32 has its own.
  const int K = 33, N = 1;
  std::vector<float> w(K);
  for (int k = 0; k < K; ++k) w[static_cast<size_t>(k)] = static_cast<float>(k - 16);
  w[32] = 0.25f;
  std::vector<uint8_t> packed(static_cast<size_t>(K * quant::q4_row_bytes(N)));
  std::vector<float> scale(static_cast<size_t>(quant::q4_groups(K) * N));
  quant::pack_q4(w.data(), K, N, packed.data(), scale.data());
  EXPECT_EQ(scale[0], 16.0f / 7.0f);
  EXPECT_EQ(scale[1], 0.25f / 7.0f);
  EXPECT_EQ(quant::q4_value(packed.data(), N, 0, 0), -7);
  EXPECT_EQ(quant::q4_value(packed.data(), N, 32, 0), 7);
  EXPECT_EQ(quant::check_q4(packed.data(), K, N), "");
}

}  // namespace
}  // namespace lockstep
