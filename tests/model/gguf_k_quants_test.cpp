// GGUF's K-quants (Q4_K, Q5_K, Q6_K: what llama.cpp's Q4_K_M, Q5_K_M and Q6_K files hold), which
// lockstep computes in integers (profile lockstep-int8dot-2, docs/ARITHMETIC.md "K-quant matrices
// in integers") or, with --widen-k-quants, widens to f32 ("K-quant matrices, widened"):
// - hand-made super-blocks give the values worked out by hand below, including a sub-block whose
//   6-bit scale and minimum are split across the packed bytes and a subtraction that rounds;
// - a model of K-quant matrices imports and loads with every tensor equal to a second decoder,
//   written here after ggml's own loops (dequantize_row_q4_K, _q5_K, _q6_K) rather than the
//   library's index arithmetic; alone it is an f32 model, beside Q8_0 matrices an int8dot one;
// - computed in integers, the same file is a lockstep-int8dot-2 model with the same parameters,
//   logits within the activations' quantization of the widened model's;
// - either way its fast path equals the reference with memcmp on every target and thread count.
// (By hand, beside the tests: llama-quantize's Q4_K_M, Q5_K_M and Q6_K files of the l768 model
// widen to the values gguf-py's own dequantize gives, every one bit for bit; bench/README.md.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/cuda/device.hpp"
#include "format/half.hpp"
#include "lockstep/interop.hpp"
#include "lockstep/model.hpp"
#include "quant/k_quants.hpp"
#include "support/gguf_writer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using namespace test;  // the GGUF writer

uint16_t f16(float v) { return format::f16_bits_from_f32(v); }
void set_f16(uint8_t* p, float v) {
  const uint16_t h = f16(v);
  p[0] = static_cast<uint8_t>(h & 255);
  p[1] = static_cast<uint8_t>(h >> 8);
}

TEST(KQuants, WidenByTheRuleOnHandMadeSuperBlocks) {
  float out[quant::kSuperBlockValues];
  {  // Q4_K: d 0.5, dmin 0.25.
    uint8_t b[144] = {};
    set_f16(b, 0.5f);
    set_f16(b + 2, 0.25f);
    uint8_t* s = b + 4;
    s[0] = 3;             // sub-block 0: scale 3 ...
    s[4] = 5;             // ... minimum 5
    s[9] = (2 << 4) | 5;  // sub-block 5: low nibbles of scale 37 (0b10'0101) and minimum 50 (0b11'0010)
    s[1] = 2 << 6;        // scale 37's top bits, in sub-block 1's scale byte
    s[5] = 3 << 6;        // minimum 50's, in sub-block 1's minimum byte
    uint8_t* qs = b + 16;
    qs[7] = 11;           // sub-block 0, value 7: low nibble of byte 7
    qs[64 + 7] = 9 << 4;  // sub-block 5 (high nibbles of bytes 64..95), value 7
    quant::widen_super_block(quant::KQuantType::q4_k, b, out);
    EXPECT_EQ(out[7], 0.5f * 3 * 11 - 0.25f * 5);  // 15.25
    EXPECT_EQ(out[7], 15.25f);
    EXPECT_EQ(out[0], -1.25f);              // q 0: the minimum alone
    EXPECT_EQ(out[5 * 32 + 7], 154.0f);     // 18.5 * 9 - 12.5
    EXPECT_EQ(out[4 * 32 + 7], 0.0f);       // sub-block 4: scale and minimum 0 (its bytes are 0)
    EXPECT_EQ(out[1 * 32], 0.0f);           // sub-block 1: scale 0, minimum 0
    // A subtraction that rounds: 1024 * 63 * 15 = 967680, less 2^-14, is 967680 in f32.
    uint8_t r[144] = {};
    set_f16(r, 1024.0f);
    set_f16(r + 2, 0x1p-14f);
    r[4] = 63;
    r[8] = 1;
    r[16] = 15;
    quant::widen_super_block(quant::KQuantType::q4_k, r, out);
    EXPECT_EQ(out[0], 967680.0f);
    EXPECT_EQ(out[1], -0x1p-14f);
  }
  {  // Q5_K: sub-block 3, value 2: high nibble of qs[32 + 2] and bit 3 of qh[2] as the fifth bit.
    uint8_t b[176] = {};
    set_f16(b, 0.125f);
    set_f16(b + 2, 1.0f);
    b[4 + 3] = 10;  // scale 10
    b[4 + 7] = 4;   // minimum 4
    b[16 + 2] = 1 << 3;
    b[48 + 32 + 2] = 6 << 4;
    quant::widen_super_block(quant::KQuantType::q5_k, b, out);
    EXPECT_EQ(out[3 * 32 + 2], 0.125f * 10 * (16 + 6) - 4.0f);  // 23.5
    EXPECT_EQ(out[3 * 32 + 3], -4.0f);
    EXPECT_EQ(out[2 * 32 + 2], 0.0f);  // sub-block 2 reads bit 2 and the low nibble: 0, scale 0
  }
  {  // Q6_K: value 200 is half 1, quarter 2, l 8: high nibble of ql[64 + 8], bits 4-5 of qh[32 + 8],
     // scale 12.
    uint8_t b[210] = {};
    set_f16(b + 208, 0.5f);
    b[64 + 8] = 13 << 4;
    b[128 + 32 + 8] = 2 << 4;
    b[192 + 12] = static_cast<uint8_t>(-7);
    quant::widen_super_block(quant::KQuantType::q6_k, b, out);
    EXPECT_EQ(out[200], 0.5f * -7 * ((13 | 32) - 32));  // -45.5
    EXPECT_EQ(out[200], -45.5f);
    EXPECT_EQ(out[201], 0.5f * -7 * -32);  // the same sub-block of 16, q = 0 - 32
    EXPECT_EQ(out[0], 0.0f);                // scale 0
  }
  // A non-finite super-scale gives non-finite values (the reader refuses the tensor).
  uint8_t inf[210] = {};
  inf[208] = 0x00, inf[209] = 0x7c;
  inf[192] = 1;
  quant::widen_super_block(quant::KQuantType::q6_k, inf, out);
  EXPECT_FALSE(std::isfinite(out[0]));
}

// ---- a second decoder, after ggml's loops, in the test ----

void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {  // ggml's get_scale_min_k4
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
  }
}

std::vector<float> ggml_loops(uint32_t type, const std::string& data) {
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  const size_t bytes = type == kQ4_K ? 144 : type == kQ5_K ? 176 : 210;
  std::vector<float> out;
  for (size_t i = 0; i < data.size() / bytes; ++i) {
    const uint8_t* x = p + i * bytes;
    float y[256];
    float* yp = y;
    if (type == kQ6_K) {
      const float d = format::f32_from_f16_bits(static_cast<uint16_t>(x[208] | x[209] << 8));
      const uint8_t* ql = x;
      const uint8_t* qh = x + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(x + 192);
      for (int n = 0; n < 256; n += 128) {
        for (int l = 0; l < 32; ++l) {
          const int is = l / 16;
          const int q1 = static_cast<int8_t>((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
          const int q2 = static_cast<int8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
          const int q3 = static_cast<int8_t>((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
          const int q4 = static_cast<int8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
          yp[l + 0] = d * sc[is + 0] * static_cast<float>(q1);
          yp[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
          yp[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
          yp[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
        }
        yp += 128, ql += 64, qh += 32, sc += 8;
      }
    } else {
      const float d = format::f32_from_f16_bits(static_cast<uint16_t>(x[0] | x[1] << 8));
      const float min = format::f32_from_f16_bits(static_cast<uint16_t>(x[2] | x[3] << 8));
      const uint8_t* scales = x + 4;
      const uint8_t* qh = x + 16;
      const uint8_t* q = x + (type == kQ5_K ? 48 : 16);
      int is = 0;
      uint8_t u1 = 1, u2 = 2;
      for (int j = 0; j < 256; j += 64) {
        int sc, m;
        scale_min_k4(is + 0, scales, &sc, &m);
        const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
        scale_min_k4(is + 1, scales, &sc, &m);
        const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
        for (int l = 0; l < 32; ++l) {
          const int hi = type == kQ5_K && (qh[l] & u1) ? 16 : 0;
          *yp++ = d1 * static_cast<float>((q[l] & 0xF) + hi) - m1;
        }
        for (int l = 0; l < 32; ++l) {
          const int hi = type == kQ5_K && (qh[l] & u2) ? 16 : 0;
          *yp++ = d2 * static_cast<float>((q[l] >> 4) + hi) - m2;
        }
        q += 32, is += 2, u1 = static_cast<uint8_t>(u1 << 2), u2 = static_cast<uint8_t>(u2 << 2);
      }
    }
    out.insert(out.end(), y, y + 256);
  }
  return out;
}

// ---- a model of K-quant matrices: d 256, 1 layer, 2 heads (1 key/value head), d_ff 512, vocab 7 ----

struct KModel {
  TestGguf file;
  bool with_q8_0 = false;
};

// Random super-blocks (every byte random) under small finite f16 super-scales; Q8_0 rows random
// integers under a small scale.
std::string random_tensor(uint32_t type, int64_t K, int64_t N, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.0005f, 0.001f);
  std::string out;
  if (type == kQ8_0) {
    for (int64_t b = 0; b < K * N / 32; ++b) {
      put(out, f16(scale(rng) * 4));
      for (int j = 0; j < 32; ++j) put<uint8_t>(out, static_cast<uint8_t>(byte(rng)));
    }
    return out;
  }
  const size_t bytes = type == kQ4_K ? 144 : type == kQ5_K ? 176 : 210;
  for (int64_t b = 0; b < K * N / 256; ++b) {
    std::string s(bytes, '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    auto* u = reinterpret_cast<uint8_t*>(s.data());
    if (type == kQ6_K) {
      set_f16(u + 208, scale(rng) / 8);
    } else {
      set_f16(u, scale(rng));
      set_f16(u + 2, scale(rng));
    }
    out += s;
  }
  return out;
}

KModel k_model(bool with_q8_0, uint64_t seed, int64_t vocab = 7) {
  KModel m;
  m.with_q8_0 = with_q8_0;
  TestGguf& g = m.file;
  g.str("general.architecture", "llama");
  g.u32("llama.context_length", 12);
  g.u32("llama.embedding_length", 256);
  g.u32("llama.block_count", 1);
  g.u32("llama.feed_forward_length", 512);
  g.u32("llama.attention.head_count", 2);
  g.u32("llama.attention.head_count_kv", 1);
  std::mt19937_64 rng(seed);
  auto add = [&](const std::string& name, uint32_t type, int64_t K, int64_t N) {
    g.tensors.push_back({name, {static_cast<uint64_t>(K), static_cast<uint64_t>(N)}, type, random_tensor(type, K, N, rng)});
  };
  auto norm = [&](const std::string& name) {
    std::string data;
    for (int i = 0; i < 256; ++i) put(data, 1.0f + 0.01f * static_cast<float>(i % 7));
    g.tensors.push_back({name, {256}, kF32, data});
  };
  add("token_embd.weight", with_q8_0 ? kQ8_0 : kQ6_K, 256, vocab);
  norm("blk.0.attn_norm.weight");
  add("blk.0.attn_q.weight", kQ4_K, 256, 256);
  add("blk.0.attn_k.weight", kQ4_K, 256, 128);
  add("blk.0.attn_v.weight", kQ5_K, 256, 128);
  add("blk.0.attn_output.weight", kQ4_K, 256, 256);
  norm("blk.0.ffn_norm.weight");
  add("blk.0.ffn_gate.weight", with_q8_0 ? kQ8_0 : kQ4_K, 256, 512);
  add("blk.0.ffn_up.weight", with_q8_0 ? kQ8_0 : kQ5_K, 256, 512);
  add("blk.0.ffn_down.weight", kQ6_K, 512, 256);
  norm("output_norm.weight");
  add("output.weight", kQ6_K, 256, vocab);
  return m;
}

// Two ragged rows of the model's window (12 and 5 tokens) over a vocabulary of 7, and the reference
// device's logits of them.
struct RaggedRows {
  std::vector<int32_t> ids = test::random_ids(2 * 12, 7, 3);
  std::vector<int32_t> lengths = {12, 5};
};
std::vector<float> reference_logits(const std::string& dir, const RaggedRows& rows) {
  LoadOptions options;
  options.device = Device::reference;
  return Model::load(dir, options)->logits({rows.ids.data(), 2, 12}, rows.lengths, {Device::reference, std::nullopt});
}

// The fast path's logits are `want` (the reference's) on every target here and thread counts 1, 2,
// 3 and 7.
void expect_fast_path_is(const std::vector<float>& want, const std::string& dir, const RaggedRows& rows,
                         const std::string& name) {
  for (const std::string& target : test::targets_under_test()) {
    LoadOptions options;
    options.simd_target = target;
    const auto fast = Model::load(dir, options);
    for (int threads : {1, 2, 3, 7})
      test::expect_same(fast->logits({rows.ids.data(), 2, 12}, rows.lengths, {Device::cpu, threads}), want,
                        name + " " + target + " threads " + std::to_string(threads));
  }
}

TEST(GgufImport, WidensKQuantsToF32ByGgmlsRule) {
  test::TempDir tmp;
  for (const bool with_q8_0 : {false, true}) {
    const KModel m = k_model(with_q8_0, with_q8_0 ? 2 : 1);
    const std::string name = with_q8_0 ? "mixed" : "k";
    test::write_file(tmp / (name + ".gguf"), m.file.bytes());
    ImportGgufOptions widen;
    widen.widen_k_quants = true;
    const ImportGgufResult r = import_gguf(tmp / (name + ".gguf"), tmp / name, widen);
    EXPECT_EQ(r.widened_k_quants, with_q8_0 ? 6 : 9) << name;
    EXPECT_EQ(r.block_matrices, with_q8_0 ? 3 : 0) << name;
    const auto model = Model::load(tmp / name);
    EXPECT_STREQ(model->profile(), with_q8_0 ? int8dot_profile_name() : profile_name()) << name;
    // Every K-quant tensor's floats are the second decoder's, bit for bit, in lockstep's layout.
    const ParameterRegistry& reg = model->registry();
    const auto& L = reg.layer(0);
    const std::map<std::string, int64_t> offset_of = {
        {"token_embd.weight", reg.embed()},     {"blk.0.attn_q.weight", L.wq},     {"blk.0.attn_k.weight", L.wk},
        {"blk.0.attn_v.weight", L.wv},          {"blk.0.attn_output.weight", L.wo}, {"blk.0.ffn_gate.weight", L.w_gate},
        {"blk.0.ffn_up.weight", L.w_up},        {"blk.0.ffn_down.weight", L.w_down}, {"output.weight", reg.head()}};
    const std::span<const float> p = model->parameters();
    int checked = 0;
    for (const TestTensor& t : m.file.tensors) {
      if (t.type != kQ4_K && t.type != kQ5_K && t.type != kQ6_K) continue;
      const int64_t K = static_cast<int64_t>(t.ne[0]), N = static_cast<int64_t>(t.ne[1]);
      const std::vector<float> want = ggml_loops(t.type, t.data);
      ASSERT_EQ(want.size(), static_cast<size_t>(K * N)) << t.name;
      const bool rows = t.name == "token_embd.weight";  // the embedding keeps its rows; matrices are [in, out]
      int wrong = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const float got = p[static_cast<size_t>(offset_of.at(t.name) + (rows ? n * K + k : k * N + n))];
          if (std::memcmp(&got, &want[static_cast<size_t>(n * K + k)], sizeof(float)) != 0) ++wrong;
        }
      EXPECT_EQ(wrong, 0) << name << " " << t.name;
      ++checked;
    }
    EXPECT_EQ(checked, with_q8_0 ? 6 : 9);
    // The fast path equals the reference on every target and thread count, ragged rows too.
    const RaggedRows rows;
    expect_fast_path_is(reference_logits(tmp / name, rows), tmp / name, rows, name);
  }
}

// The same files computed in integers (the default): profile lockstep-int8dot-2, every matrix in
// blocks, the parameters (what the embedding and parameters() read) the widened model's bit for
// bit, the logits within what quantizing the activations to 8 bits moves them from the widened
// model's, and the fast path the reference's on every target and thread count, ragged rows too.
TEST(GgufImport, ComputesKQuantsInIntegers) {
  test::TempDir tmp;
  for (const bool with_q8_0 : {false, true}) {
    const KModel m = k_model(with_q8_0, with_q8_0 ? 2 : 1);
    const std::string name = with_q8_0 ? "mixed" : "k";
    test::write_file(tmp / (name + ".gguf"), m.file.bytes());
    const ImportGgufResult r = import_gguf(tmp / (name + ".gguf"), tmp / name);
    EXPECT_EQ(r.widened_k_quants, 0) << name;
    EXPECT_EQ(r.block_matrices, 9) << name;
    EXPECT_EQ(r.profile, int8dot_k_profile_name()) << name;
    ImportGgufOptions widen;
    widen.widen_k_quants = true;
    import_gguf(tmp / (name + ".gguf"), tmp / (name + "-widened"), widen);
    const auto model = Model::load(tmp / name);
    const auto widened = Model::load(tmp / (name + "-widened"));
    EXPECT_STREQ(model->profile(), int8dot_k_profile_name()) << name;
    test::expect_same(std::vector<float>(model->parameters().begin(), model->parameters().end()),
                      std::vector<float>(widened->parameters().begin(), widened->parameters().end()), name + " parameters");
    const RaggedRows rows;
    const auto want = reference_logits(tmp / name, rows);
    const auto f32 = widened->logits({rows.ids.data(), 2, 12}, rows.lengths, {Device::cpu, 1});
    float scale = 0, diff = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(f32[i]));
      diff = std::max(diff, std::fabs(want[i] - f32[i]));
    }
    EXPECT_GT(diff, 0.0f) << name;  // the integer profile is another computation
    EXPECT_LT(diff, 0.05f * scale) << name << ": the integer logits stray from the widened model's";
    expect_fast_path_is(want, tmp / name, rows, name);
  }
}

// export-gguf of a lockstep-int8dot-2 model writes the very K-quant blocks it computes from (a
// byte-level model: export needs token strings, which a vocabulary of 256 bytes has), and the file
// imports again to the same logits.
TEST(GgufImport, ExportWritesTheSameKQuantBlocks) {
  test::TempDir tmp;
  const KModel m = k_model(false, 8, 256);
  test::write_file(tmp / "k.gguf", m.file.bytes());
  import_gguf(tmp / "k.gguf", tmp / "k");
  export_gguf(tmp / "k", tmp / "again.gguf", GgufOptions{"f32", "again"});
  test::expect_holds_tensors(test::read_file(tmp / "again.gguf"), m.file.tensors, "again.gguf");
  import_gguf(tmp / "again.gguf", tmp / "k2");
  const auto ids = test::random_ids(12, 256, 8);
  EXPECT_TRUE(test::same_bits(Model::load(tmp / "k")->logits({ids.data(), 1, 12}),
                              Model::load(tmp / "k2")->logits({ids.data(), 1, 12})));
}

// `bytes` as a GGUF file is refused with an error that says `says`, and no model directory appears
// (computing the K-quants in integers or widening them).
void expect_refused(const test::TempDir& tmp, const std::string& bytes, const std::string& says) {
  test::write_file(tmp / "bad.gguf", bytes);
  for (const bool widen : {false, true}) {
    ImportGgufOptions options;
    options.widen_k_quants = widen;
    try {
      import_gguf(tmp / "bad.gguf", tmp / "bad", options);
      ADD_FAILURE() << "imported a file that should be refused: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(tmp / "bad"));
  }
}

// `lockstep import gguf` says what it kept in blocks and what the model became; with
// --widen-k-quants, how many K-quant tensors it widened.
TEST(GgufImport, TheCommandSaysWhatItWidened) {
  test::TempDir tmp;
  test::write_file(tmp / "k.gguf", k_model(false, 4).file.bytes());
  const auto r = test::run_command({LOCKSTEP_BINARY, "import", "gguf", tmp / "k.gguf", "-o", tmp / "k"});
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* want : {"(Q6_K, F32, Q4_K, Q5_K; 9 matrices kept in blocks)\n",
                           "profile lockstep-int8dot-2, vocab 7, window 12, d_model 256, 1 layers, 2 heads (1 kv), d_ff 512"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  EXPECT_EQ(r.out.find("widened"), std::string::npos) << r.out;
  const auto w = test::run_command({LOCKSTEP_BINARY, "import", "gguf", tmp / "k.gguf", "-o", tmp / "w", "--widen-k-quants"});
  ASSERT_EQ(w.status, 0) << w.err;
  for (const char* want : {"(Q6_K, F32, Q4_K, Q5_K; 0 matrices kept in blocks)\n",
                           "widened to f32: 9 K-quant tensors (--widen-k-quants; 4 bytes a weight)",
                           "profile lockstep-f32-1, vocab 7, window 12, d_model 256, 1 layers, 2 heads (1 kv), d_ff 512"})
    EXPECT_NE(w.out.find(want), std::string::npos) << want << "\n" << w.out;
}

// Llama 3's rope_freqs in a block type (64 pairs here: two Q8_0 blocks) is refused by its type,
// not read as floats past its bytes.
TEST(GgufImport, RefusesRopeFreqsInABlockType) {
  test::TempDir tmp;
  KModel m = k_model(false, 5);
  std::string data;
  for (int b = 0; b < 2; ++b) {
    put(data, f16(0.1f));
    for (int j = 0; j < 32; ++j) put<int8_t>(data, 10);
  }
  m.file.tensors.push_back({"rope_freqs.weight", {64}, kQ8_0, data});
  expect_refused(tmp, m.file.bytes(), "tensor 'rope_freqs.weight' is of type Q8_0; lockstep reads it as F32, F16 or BF16");
}

// A fused matrix mixing K-quant parts with Q8_0 ones ([w_gate | w_up] here) is refused when the
// model loads, naming what it mixes (widened, it would mix floats and blocks: refused as well).
TEST(GgufImport, RefusesAFusedMatrixMixingKQuantsWithOtherBlocks) {
  test::TempDir tmp;
  KModel m = k_model(false, 10);
  std::mt19937_64 rng(10);
  for (TestTensor& t : m.file.tensors)
    if (t.name == "blk.0.ffn_up.weight") {
      t.type = kQ8_0;
      t.data = random_tensor(kQ8_0, 256, 512, rng);
    }
  test::write_file(tmp / "mix.gguf", m.file.bytes());
  import_gguf(tmp / "mix.gguf", tmp / "mix");
  try {
    (void)Model::load(tmp / "mix");
    ADD_FAILURE() << "loaded a fused matrix of K-quant and Q8_0 parts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mixes K-quant parts (Q4_K, Q5_K, Q6_K) with Q8_0, Q4_0 or Q5_0 ones"),
              std::string::npos) << e.what();
  }
}

// model.json naming lockstep-int8dot-2 over a GGUF file without K-quants is refused by the loader,
// naming the profile the file has: the profile says how the file computes, and never silently.
TEST(GgufImport, TheKQuantProfileNeedsKQuants) {
  test::TempDir tmp;
  KModel m = k_model(true, 11);
  std::mt19937_64 rng(11);
  for (TestTensor& t : m.file.tensors)
    if (t.type == kQ4_K || t.type == kQ5_K || t.type == kQ6_K) {
      t.type = kQ8_0;
      t.data = random_tensor(kQ8_0, static_cast<int64_t>(t.ne[0]), static_cast<int64_t>(t.ne[1]), rng);
    }
  test::write_file(tmp / "q8.gguf", m.file.bytes());
  EXPECT_EQ(import_gguf(tmp / "q8.gguf", tmp / "q8").profile, int8dot_profile_name());
  auto j = nlohmann::ordered_json::parse(test::read_file(tmp / "q8/model.json"));
  j["profile"] = int8dot_k_profile_name();
  test::write_file(tmp / "q8/model.json", j.dump(2));
  try {
    (void)Model::load(tmp / "q8");
    ADD_FAILURE() << "loaded a lockstep-int8dot-2 model without K-quants";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.json names profile lockstep-int8dot-2 but the file has no Q4_K, Q5_K or "
                                         "Q6_K matrix (its profile is lockstep-int8dot-1)"),
              std::string::npos) << e.what();
  }
}

// The cuda device computes lockstep-f32-1 alone: an int8dot model is refused there, at load and
// per call, naming its profile (before any GPU is looked for), never computed from its f32 copy.
TEST(GgufImport, TheCudaDeviceRefusesIntegerProfiles) {
  if (!cuda::compiled_in()) GTEST_SKIP() << "a build without CUDA refuses the device's name itself";
  test::TempDir tmp;
  test::write_file(tmp / "k.gguf", k_model(false, 12).file.bytes());
  import_gguf(tmp / "k.gguf", tmp / "k");
  const std::string want =
      "device 'cuda' computes profile lockstep-f32-1 alone; this model's is lockstep-int8dot-2 (matrices in GGUF "
      "blocks, computed in integers): run it with --device cpu or reference";
  LoadOptions options;
  options.device = Device::cuda;
  try {
    (void)Model::load(tmp / "k", options);
    ADD_FAILURE() << "loaded an int8dot model on the cuda device";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
  const auto model = Model::load(tmp / "k");
  const std::vector<int32_t> ids = {1, 2, 3};
  try {
    (void)model->logits({ids.data(), 1, 3}, {}, {Device::cuda, std::nullopt});
    ADD_FAILURE() << "ran an int8dot model on the cuda device";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

// A K-quant tensor whose super-scale is not finite is refused naming it and its super-block.
TEST(GgufImport, RefusesANonFiniteKQuantScale) {
  test::TempDir tmp;
  KModel m = k_model(false, 3);
  TestTensor& t = m.file.tensors[2];  // blk.0.attn_q.weight, Q4_K
  t.data[144 * 5 + 2] = 0x00, t.data[144 * 5 + 3] = static_cast<char>(0x7c);  // super-block 5's dmin: +inf
  expect_refused(tmp, m.file.bytes(), "tensor 'blk.0.attn_q.weight' super-block 5 has a non-finite scale");
}

}  // namespace
}  // namespace lockstep
