// Models of the profile lockstep-int8dot-1 (docs/ARITHMETIC.md) imported from GGUF files that a
// writer of this test's own writes from the specification (ggml's docs/gguf.md: little-endian
// header "GGUF", version, tensor and key-value counts; typed key-value pairs; tensor infos of
// name, dimensions, ne, type and offset; the data aligned), with Q8_0, Q4_0 and Q5_0 blocks made
// by this test's own quantizers:
// - the blocks are kept bit for bit (the model directory's copy, and what the kernels read);
// - the fast path equals the reference with memcmp on every target, thread counts 1, 2, 3 and 7,
//   ragged batches, sessions stepped alone and together, and the prefix cache;
// - the logits are within what the activations' quantization implies of a float64 forward pass
//   over the dequantized weights;
// - bad files are refused naming what is wrong, and nothing is written.
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

#include "format/gguf_read.hpp"
#include "format/half.hpp"
#include "format/json_text.hpp"
#include "kernels/ref/ops.hpp"
#include "lockstep/chat_template.hpp"
#include "lockstep/interop.hpp"
#include "lockstep/model.hpp"
#include "lockstep/prefix_cache.hpp"
#include "lockstep/session.hpp"
#include "lockstep/tokenizer.hpp"
#include "kernels/simd/block_matrix.hpp"
#include "model/model_impl.hpp"
#include "model/packed_weights.hpp"
#include "support/gguf_writer.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using namespace test;  // the GGUF writer

// ---- the test's own quantizers (ggml's rules: Q8_0 d = amax / 127; Q4_0 and Q5_0 d = the
// signed value of largest magnitude / -8 or / -16, q = x / d + 8 or + 16 clamped) ----

uint16_t f16(float v) { return format::f16_bits_from_f32(v); }

std::string quantize_row(uint32_t type, const float* x, int64_t K) {
  std::string out;
  for (int64_t b = 0; b < K / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(v[j]) > amax) amax = std::fabs(v[j]), max = v[j];
    if (type == kQ8_0) {
      const float d = amax / 127;
      put(out, f16(d));
      for (int j = 0; j < 32; ++j) put<int8_t>(out, static_cast<int8_t>(d == 0 ? 0 : std::lround(v[j] / d)));
      continue;
    }
    const int levels = type == kQ4_0 ? 8 : 16;
    const float d = max / static_cast<float>(-levels), id = d == 0 ? 0 : 1 / d;
    put(out, f16(d));
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = std::clamp(static_cast<int>(v[j] * id + static_cast<float>(levels) + 0.5f), 0, 2 * levels - 1);
    if (type == kQ5_0) {
      uint32_t qh = 0;
      for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
      put(out, qh);
    }
    for (int j = 0; j < 16; ++j) put<uint8_t>(out, static_cast<uint8_t>((q[j] & 15) | ((q[j + 16] & 15) << 4)));
  }
  return out;
}

// w [N, K] (one row per output, GGUF's order) as tensor data of `type`.
std::string tensor_data(uint32_t type, const std::vector<float>& w, int64_t K, int64_t N) {
  std::string out;
  for (int64_t n = 0; n < N; ++n) {
    if (type == kF32) {
      for (int64_t k = 0; k < K; ++k) put(out, w[static_cast<size_t>(n * K + k)]);
    } else if (type == kF16) {
      for (int64_t k = 0; k < K; ++k) put(out, f16(w[static_cast<size_t>(n * K + k)]));
    } else {
      out += quantize_row(type, w.data() + n * K, K);
    }
  }
  return out;
}

// The values a tensor's data stands for, [N, K], in float64 (d * q, from the bytes).
std::vector<double> dequantized(uint32_t type, const std::string& data, int64_t K, int64_t N) {
  std::vector<double> out(static_cast<size_t>(N * K));
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  if (type == kF32) {
    for (size_t i = 0; i < out.size(); ++i) {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      out[i] = f;
    }
    return out;
  }
  const int64_t bytes = type == kQ8_0 ? 34 : type == kQ4_0 ? 18 : 22;
  for (int64_t blk = 0; blk < N * K / 32; ++blk) {
    const uint8_t* b = p + blk * bytes;
    const double d = format::f32_from_f16_bits(static_cast<uint16_t>(b[0] | b[1] << 8));
    for (int j = 0; j < 32; ++j) {
      int q;
      if (type == kQ8_0) {
        q = static_cast<int8_t>(b[2 + j]);
      } else if (type == kQ4_0) {
        q = (j < 16 ? b[2 + j] & 15 : b[2 + j - 16] >> 4) - 8;
      } else {
        uint32_t qh;
        std::memcpy(&qh, b + 2, 4);
        q = ((j < 16 ? b[6 + j] & 15 : b[6 + j - 16] >> 4) | static_cast<int>((qh >> j) & 1) << 4) - 16;
      }
      out[static_cast<size_t>(blk * 32 + j)] = d * q;
    }
  }
  return out;
}

// A small llama model: d 64, 2 layers, 4 heads (2 key/value heads), d_ff 96, vocab 67, window
// 24; the matrices in a mix of the three block types (the fused [wq | wk | wv] all Q4_0, so it
// keeps its nibbles; [w_gate | w_up] Q8_0; wo and w_down Q5_0; the embedding Q8_0, the head Q4_0
// or tied to the embedding).
struct TestModel {
  TestGguf file;
  std::map<std::string, std::pair<uint32_t, std::vector<uint64_t>>> shapes;  // name -> type, ne
};

TestModel test_model(bool tied, uint64_t seed, const std::string& vocabulary = "", int64_t vocab = 67,
                     const std::string& arch = "llama") {
  TestModel m;
  TestGguf& g = m.file;
  g.str("general.architecture", arch);
  g.u32("general.alignment", 32);
  g.u32(arch + ".context_length", 24);
  g.u32(arch + ".embedding_length", 64);
  g.u32(arch + ".block_count", 2);
  g.u32(arch + ".feed_forward_length", 96);
  g.u32(arch + ".attention.head_count", 4);
  g.u32(arch + ".attention.head_count_kv", 2);
  g.u32(arch + ".rope.dimension_count", 16);
  g.f32(arch + ".rope.freq_base", 10000.0f);
  g.f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  if (!vocabulary.empty()) {
    g.str("tokenizer.ggml.model", vocabulary);
    std::vector<std::string> tokens;
    for (int i = 0; i < 67; ++i) tokens.push_back(std::to_string(i));
    g.strings("tokenizer.ggml.tokens", tokens);
  }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto add = [&](const std::string& name, uint32_t type, int64_t K, int64_t N, float scale, float mean = 0) {
    std::vector<float> w(static_cast<size_t>(K * N));
    for (float& v : w) v = mean + scale * normal(rng);
    std::vector<uint64_t> ne = {static_cast<uint64_t>(K)};
    if (N > 1 || name.find("norm") == std::string::npos) ne.push_back(static_cast<uint64_t>(N));
    g.tensors.push_back({name, ne, type, tensor_data(type, w, K, N)});
    m.shapes[name] = {type, ne};
  };
  add("token_embd.weight", kQ8_0, 64, vocab, 1.0f);
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add(b + "attn_norm.weight", kF32, 64, 1, 0.1f, 1.0f);
    add(b + "attn_q.weight", kQ4_0, 64, 64, 0.15f);
    add(b + "attn_k.weight", kQ4_0, 64, 32, 0.15f);
    add(b + "attn_v.weight", kQ4_0, 64, 32, 0.15f);
    add(b + "attn_output.weight", kQ5_0, 64, 64, 0.1f);
    add(b + "ffn_norm.weight", kF32, 64, 1, 0.1f, 1.0f);
    add(b + "ffn_gate.weight", kQ8_0, 64, 96, 0.15f);
    add(b + "ffn_up.weight", kQ8_0, 64, 96, 0.15f);
    add(b + "ffn_down.weight", kQ5_0, 96, 64, 0.1f);
  }
  add("output_norm.weight", kF32, 64, 1, 0.1f, 1.0f);
  if (!tied) add("output.weight", kQ4_0, 64, vocab, 0.15f);
  // Outside files hold -128 in Q8_0 blocks: one in the embedding and one in w_up.
  g.tensors[0].data[2 + 5] = static_cast<char>(0x80);
  for (TestTensor& t : g.tensors)
    if (t.name == "blk.1.ffn_up.weight") t.data[34 * 7 + 2 + 9] = static_cast<char>(0x80);
  return m;
}

// The float64 forward pass (docs/ARITHMETIC.md's operations in double, no activation
// quantization) over the weights the file's tensors stand for, for one row of ids.
std::vector<double> float64_logits(const TestModel& m, const std::vector<int32_t>& ids) {
  const int64_t d = 64, hd = 16, ff = 96, V = 67, T = static_cast<int64_t>(ids.size());
  std::map<std::string, std::vector<double>> w;  // lockstep's layout: matrices [in, out]
  for (const TestTensor& t : m.file.tensors) {
    const int64_t K = static_cast<int64_t>(t.ne[0]), N = t.ne.size() > 1 ? static_cast<int64_t>(t.ne[1]) : 1;
    const std::vector<double> rows = dequantized(t.type, t.data, K, N);
    if (t.name == "token_embd.weight" || N == 1) {
      w[t.name] = rows;
      if (t.name != "token_embd.weight") continue;
    }
    std::vector<double> io(static_cast<size_t>(K * N));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) io[static_cast<size_t>(k * N + n)] = rows[static_cast<size_t>(n * K + k)];
    w[t.name == "token_embd.weight" ? "tied_head" : t.name] = io;
  }
  const std::vector<double>& head = w.count("output.weight") ? w["output.weight"] : w["tied_head"];
  std::vector<double> cos(static_cast<size_t>(24 * hd / 2)), sin(cos.size());
  ref::rope_tables<double>(24, static_cast<int32_t>(hd), 10000.0f, cos.data(), sin.data());
  const double eps = static_cast<double>(1e-5f), scale = ref::attention_scale<double>(static_cast<int32_t>(hd));
  std::vector<double> x(static_cast<size_t>(T * d));
  for (int64_t t = 0; t < T; ++t)
    std::copy_n(w["token_embd.weight"].begin() + ids[static_cast<size_t>(t)] * d, d, x.begin() + t * d);
  std::vector<double> keys(static_cast<size_t>(T * 32)), values(keys.size());
  for (int l = 0; l < 2; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    for (int64_t t = 0; t < T; ++t) {
      double* xt = x.data() + t * d;
      std::vector<double> xn(64), q(64), att(64), o(64), g(96), u(96), h(96), scores(static_cast<size_t>(T));
      ref::rmsnorm<double>(xt, w[b + "attn_norm.weight"].data(), xn.data(), d, eps);
      ref::matmul<double>(xn.data(), w[b + "attn_q.weight"].data(), q.data(), 1, d, 64);
      ref::matmul<double>(xn.data(), w[b + "attn_k.weight"].data(), keys.data() + t * 32, 1, d, 32);
      ref::matmul<double>(xn.data(), w[b + "attn_v.weight"].data(), values.data() + t * 32, 1, d, 32);
      ref::rope<double>(q.data(), 4, 16, cos.data() + t * 8, sin.data() + t * 8);
      ref::rope<double>(keys.data() + t * 32, 2, 16, cos.data() + t * 8, sin.data() + t * 8);
      for (int head_i = 0; head_i < 4; ++head_i)
        ref::attention<double>(q.data() + head_i * 16, keys.data() + (head_i / 2) * 16, values.data() + (head_i / 2) * 16, 32,
                               t + 1, 16, scale, att.data() + head_i * 16, scores.data());
      ref::matmul<double>(att.data(), w[b + "attn_output.weight"].data(), o.data(), 1, 64, d);
      for (int64_t i = 0; i < d; ++i) xt[i] += o[static_cast<size_t>(i)];
      ref::rmsnorm<double>(xt, w[b + "ffn_norm.weight"].data(), xn.data(), d, eps);
      ref::matmul<double>(xn.data(), w[b + "ffn_gate.weight"].data(), g.data(), 1, d, ff);
      ref::matmul<double>(xn.data(), w[b + "ffn_up.weight"].data(), u.data(), 1, d, ff);
      ref::swiglu<double>(g.data(), u.data(), h.data(), ff);
      ref::matmul<double>(h.data(), w[b + "ffn_down.weight"].data(), o.data(), 1, ff, d);
      for (int64_t i = 0; i < d; ++i) xt[i] += o[static_cast<size_t>(i)];
    }
  }
  std::vector<double> logits(static_cast<size_t>(T * V)), xn(64);
  for (int64_t t = 0; t < T; ++t) {
    ref::rmsnorm<double>(x.data() + t * d, w["output_norm.weight"].data(), xn.data(), d, eps);
    ref::matmul<double>(xn.data(), head.data(), logits.data() + t * V, 1, d, V);
  }
  return logits;
}

bool has_all(const std::string& text, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    if (text.find(p) == std::string::npos) return false;
  return true;
}

std::string import_file(const test::TempDir& tmp, const std::string& bytes, const std::string& name,
                        const ImportGgufOptions& options = {}) {
  const std::string file = tmp / (name + ".gguf"), out = tmp / name;
  test::write_file(file, bytes);
  import_gguf(file, out, options);
  return out;
}

TEST(GgufImport, KeepsTheBlocksBitForBitAndLoadsAsTheInt8dotProfile) {
  test::TempDir tmp;
  for (const bool tied : {false, true}) {
    const TestModel m = test_model(tied, 1);
    const std::string bytes = m.file.bytes();
    const std::string dir = import_file(tmp, bytes, tied ? "tied" : "untied");
    EXPECT_EQ(test::read_file(dir + "/model.gguf"), bytes);  // the file, byte for byte
    const auto j = lockstep::format::parse_json(test::read_file(dir + "/model.json"));
    EXPECT_EQ(j.at("profile"), "lockstep-int8dot-1");
    EXPECT_EQ(j.at("format_version"), 2);
    EXPECT_EQ(j.at("weights").at("format"), "gguf");
    const auto model = Model::load(dir);
    EXPECT_STREQ(model->profile(), int8dot_profile_name());
    EXPECT_EQ(model->weight_format(), "gguf");
    // What the kernels read: every block matrix's rows are the tensor's bytes.
    const auto& blocks = *model->impl().blocks;
    const ParameterRegistry& reg = model->registry();
    EXPECT_EQ(blocks.size(), size_t{2 + 2 * 7});
    for (const TestTensor& t : m.file.tensors) {
      if (t.type == kF32) continue;
      int64_t offset = -1;
      if (t.name == "token_embd.weight") offset = reg.embed();
      if (t.name == "output.weight") offset = reg.head();
      if (t.name == "blk.1.ffn_up.weight") offset = reg.layer(1).w_up;
      if (t.name == "blk.0.attn_k.weight") offset = reg.layer(0).wk;
      if (offset < 0) continue;
      const auto& rows = blocks.at(offset).rows;
      EXPECT_EQ(std::string(rows.begin(), rows.end()), t.data) << t.name;
    }
    if (tied) {  // the head is the embedding's rows
      const auto& head = blocks.at(reg.head()).rows;
      EXPECT_EQ(std::string(head.begin(), head.end()), m.file.tensors[0].data);
    }
    // A changed weights file is refused by its SHA-256.
    std::string changed = bytes;
    changed[changed.size() - 1] ^= 1;
    test::write_file(dir + "/model.gguf", changed);
    try {
      Model::load(dir);
      ADD_FAILURE() << "loaded a changed model.gguf";
    } catch (const Error& e) {
      EXPECT_TRUE(has_all(e.what(), {"model.gguf", "SHA-256"})) << e.what();
    }
  }
}

// A loaded model holds its matrices in blocks only: the f32 copy of each (which parameters() and
// the reference device read) is given back page by page as the reader dequantizes it, and
// restored from the blocks on demand, bit for bit the dequantized weights. (For a 1.1B Q4_0
// file that copy was 4.4 GB beside 0.6 GB of blocks.)
TEST(GgufImport, HoldsItsMatricesInBlocksAndRestoresTheirFloatsOnDemand) {
  test::TempDir tmp;
  for (const bool tied : {false, true}) {
    const TestModel m = test_model(tied, 3);
    const std::string dir = import_file(tmp, m.file.bytes(), tied ? "tied" : "untied");
    const auto model = Model::load(dir);
    const Model::Impl& impl = model->impl();
    const ParameterRegistry& reg = model->registry();
    int64_t matrix_floats = 0;  // the block matrices' f32 copies (the embedding's excepted)
    for (const auto& [offset, rows] : *impl.blocks)
      if (offset != reg.embed()) matrix_floats += rows.K * rows.N;
    const size_t all_f32 = static_cast<size_t>(reg.total()) * sizeof(float);
    size_t packed = 0;
    for (const auto& L : impl.packed->layers)
      packed += L.qkv.blocks->data.size() + L.wo.blocks->data.size() + L.gate_up.blocks->data.size() +
                L.w_down.blocks->data.size();
    packed += impl.packed->head.blocks->data.size();
    const size_t resident = impl.resident_weight_bytes();
    // Each matrix keeps at most the two pages at its ends: at least half of the copies is gone.
    EXPECT_LE(resident, all_f32 + packed - static_cast<size_t>(matrix_floats) * sizeof(float) / 2)
        << (tied ? "tied" : "untied");

    // parameters() gives every tensor's dequantized values, in lockstep's layout.
    const std::span<const float> p = model->parameters();
    std::map<std::string, int64_t> offset_of = {{"token_embd.weight", reg.embed()},
                                                {"output_norm.weight", reg.final_norm()},
                                                {"output.weight", reg.head()}};
    for (int l = 0; l < 2; ++l) {
      const auto& L = reg.layer(l);
      const std::string b = "blk." + std::to_string(l) + ".";
      offset_of[b + "attn_norm.weight"] = L.attn_norm;
      offset_of[b + "attn_q.weight"] = L.wq;
      offset_of[b + "attn_k.weight"] = L.wk;
      offset_of[b + "attn_v.weight"] = L.wv;
      offset_of[b + "attn_output.weight"] = L.wo;
      offset_of[b + "ffn_norm.weight"] = L.mlp_norm;
      offset_of[b + "ffn_gate.weight"] = L.w_gate;
      offset_of[b + "ffn_up.weight"] = L.w_up;
      offset_of[b + "ffn_down.weight"] = L.w_down;
    }
    auto expect_tensor = [&](const TestTensor& t, int64_t offset, bool as_matrix) {
      const int64_t K = static_cast<int64_t>(t.ne[0]), N = t.ne.size() > 1 ? static_cast<int64_t>(t.ne[1]) : 1;
      const std::vector<double> rows = dequantized(t.type, t.data, K, N);
      int wrong = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) {
          const float want = static_cast<float>(rows[static_cast<size_t>(n * K + k)]);
          const float got = p[static_cast<size_t>(offset + (as_matrix ? k * N + n : n * K + k))];
          if (std::memcmp(&want, &got, sizeof(float)) != 0) ++wrong;
        }
      EXPECT_EQ(wrong, 0) << t.name << (tied ? " (tied)" : "");
    };
    for (const TestTensor& t : m.file.tensors)
      expect_tensor(t, offset_of.at(t.name), t.ne.size() > 1 && t.name != "token_embd.weight");
    if (tied) expect_tensor(m.file.tensors[0], reg.head(), true);
  }
}

TEST(GgufImport, FastPathEqualsTheReferenceEverywhere) {
  test::TempDir tmp;
  const std::string dir = import_file(tmp, test_model(false, 2).file.bytes(), "m");
  LoadOptions ref_options;
  ref_options.device = Device::reference;
  const auto reference = Model::load(dir, ref_options);
  const int64_t T = 24, V = 67;
  for (const std::string& target : test::targets_under_test()) {
    LoadOptions options;
    options.simd_target = target;
    const auto fast = Model::load(dir, options);
    // 40 rows: about 480 tokens in one call, every matmul phase cut into several row groups.
    for (int64_t B : {1, 2, 5, 40}) {
      const auto ids = test::random_ids(B * T, 67, static_cast<uint64_t>(B * 7));
      std::vector<int32_t> lengths;
      for (int64_t b = 0; b < B; ++b) lengths.push_back(static_cast<int32_t>(1 + (b * 11 + B * 5) % T));
      const auto want = reference->logits({ids.data(), B, T}, lengths, {Device::reference, std::nullopt});
      for (int threads : {1, 2, 3, 7}) {
        const auto got = fast->logits({ids.data(), B, T}, lengths, {Device::cpu, threads});
        test::expect_same(got, want, target + " B=" + std::to_string(B) + " threads " + std::to_string(threads));
        if (HasFailure()) return;
      }
    }
    // Sessions: appends of 1 to 3 tokens equal the reference's full pass at each last position.
    const auto ids = test::random_ids(T, 67, 99);
    const auto full = reference->logits({ids.data(), 1, T}, {}, {Device::reference, std::nullopt});
    for (int threads : {1, 3}) {
      Session s(fast, {Device::cpu, threads});
      int64_t at = 0;
      for (int chunk : {1, 2, 1, 3, 1, 1, 2}) {
        const auto got = s.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(at), static_cast<size_t>(chunk)));
        at += chunk;
        test::expect_same(got, std::vector<float>(full.begin() + (at - 1) * V, full.begin() + at * V),
                          target + " session at " + std::to_string(at));
        if (HasFailure()) return;
      }
    }
    // Sessions stepped together, ragged.
    std::vector<Session> sessions;
    std::vector<std::vector<float>> out(3, std::vector<float>(static_cast<size_t>(V)));
    std::vector<SessionStep> steps;
    for (int s = 0; s < 3; ++s) {
      sessions.emplace_back(fast, CallOptions{Device::cpu, 2});
      sessions.back().append(std::span<const int32_t>(ids).subspan(0, static_cast<size_t>(1 + 3 * s)));
    }
    for (int s = 0; s < 3; ++s)
      steps.push_back({&sessions[static_cast<size_t>(s)],
                       std::span<const int32_t>(ids).subspan(static_cast<size_t>(1 + 3 * s), static_cast<size_t>(1 + s % 2)),
                       out[static_cast<size_t>(s)].data(), nullptr});
    append_batch(steps, {Device::cpu, 2});
    for (int s = 0; s < 3; ++s) {
      const int64_t last = 1 + 3 * s + (1 + s % 2);
      test::expect_same(out[static_cast<size_t>(s)], std::vector<float>(full.begin() + (last - 1) * V, full.begin() + last * V),
                        target + " batched session " + std::to_string(s));
    }
    // The prefix cache: a session restored from a cached prefix gives the bits of position 0 on.
    PrefixCache cache(fast);
    Session first(fast, {Device::cpu, 2});
    first.append(std::span<const int32_t>(ids).subspan(0, 10));
    cache.keep(first);
    Session second(fast, {Device::cpu, 2});
    const int32_t reused = cache.restore(second, std::span<const int32_t>(ids).subspan(0, 16), 15);
    EXPECT_EQ(reused, 10);
    const auto got = second.append(std::span<const int32_t>(ids).subspan(static_cast<size_t>(reused), static_cast<size_t>(16 - reused)));
    test::expect_same(got, std::vector<float>(full.begin() + 15 * V, full.begin() + 16 * V), target + " prefix cache");
  }
}

// The activations' quantization rounds each to the nearest of 255 levels of its block's largest
// magnitude: a relative error of at most 1/254 of the block's amax per value, so each matmul's
// output moves by about that share of its inputs' scale, and the logits by a few of those
// through two layers. Measured here: the largest difference is under 2% of the largest logit;
// the bound is 5%. Greedy choices agree wherever the float64 top two are further apart than it.
TEST(GgufImport, LogitsAreCloseToAFloat64ForwardOfTheDequantizedWeights) {
  test::TempDir tmp;
  for (const bool tied : {false, true}) {
    const TestModel m = test_model(tied, 3);
    const auto model = Model::load(import_file(tmp, m.file.bytes(), tied ? "t" : "u"));
    const auto ids = test::random_ids(24, 67, 5);
    const auto got = model->logits({ids.data(), 1, 24});
    const auto want = float64_logits(m, ids);
    double worst = 0, largest = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - want[i]));
      largest = std::max(largest, std::fabs(want[i]));
    }
    std::printf("int8dot against float64 (%s head): largest difference %.3g, %.2f%% of the largest logit %.3g\n",
                tied ? "tied" : "own", worst, 100 * worst / largest, largest);
    EXPECT_LT(worst, 0.05 * largest);
    for (int64_t t = 0; t < 24; ++t) {
      const double* z = want.data() + t * 67;
      int best = 0, second = -1;
      for (int v = 1; v < 67; ++v) {
        if (z[v] > z[best]) {
          second = best;
          best = v;
        } else if (second < 0 || z[v] > z[second]) {
          second = v;
        }
      }
      if (z[best] - z[second] > 2 * worst) {
        EXPECT_EQ(greedy_choice(std::span<const float>(got).subspan(static_cast<size_t>(t * 67), 67)), best) << t;
      }
    }
  }
}

// Each bad file is refused naming what is wrong, and nothing is written.
TEST(GgufImport, BadFilesAreRefusedNamingWhatAndWriteNothing) {
  test::TempDir tmp;
  int n = 0;
  auto expect_refused = [&](const std::string& bytes, const std::vector<std::string>& parts,
                            const ImportGgufOptions& options = {}) {
    const std::string file = tmp / ("bad" + std::to_string(n) + ".gguf"), out = tmp / ("bad" + std::to_string(n));
    ++n;
    test::write_file(file, bytes);
    try {
      import_gguf(file, out, options);
      ADD_FAILURE() << "imported a bad file, expecting: " << parts[0];
    } catch (const Error& e) {
      EXPECT_TRUE(has_all(e.what(), parts)) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(out)) << "wrote " << out;
  };
  const TestModel good = test_model(false, 4);
  const std::string bytes = good.file.bytes();
  // Truncated anywhere: in the header, the keys, the tensor infos, the data.
  for (size_t cut : {size_t{3}, size_t{10}, size_t{40}, size_t{400}, size_t{900}, bytes.size() / 2, bytes.size() - 1})
    expect_refused(bytes.substr(0, cut), {"bad"});
  expect_refused(bytes.substr(0, bytes.size() - 1), {"runs past the end of the file"});
  {
    std::string other = bytes;
    other.replace(0, 4, "GGML");
    expect_refused(other, {"not a GGUF file"});
  }
  {
    TestModel m = good;
    m.file.version = 1;
    expect_refused(m.file.bytes(), {"GGUF version 1 is not supported"});
  }
  {
    TestModel m = good;  // a K-quant lockstep does not read: named with its tensor
    m.file.tensors[3].type = 11;
    expect_refused(m.file.bytes(), {"tensor 'blk.0.attn_k.weight' is of type Q3_K", "does not read",
                                    "Q4_K, Q5_K and Q6_K"});
  }
  {
    TestModel m = good;  // one it reads, over rows that are not whole super-blocks
    m.file.tensors[3].type = kQ4_K;
    expect_refused(m.file.bytes(),
                   {"tensor 'blk.0.attn_k.weight' has rows of 64 values, not a whole number of Q4_K blocks of 256"});
  }
  {
    TestModel m = good;  // a type number ggml does not define
    m.file.tensors[3].type = 77;
    expect_refused(m.file.bytes(), {"tensor 'blk.0.attn_k.weight' is of type type 77"});
  }
  {
    TestModel m = good;  // two tensors over the same bytes
    m.file.offset_override["blk.0.attn_k.weight"] = 0;
    expect_refused(m.file.bytes(), {"overlaps"});
  }
  {
    TestModel m = good;  // out of range
    m.file.offset_override["output.weight"] = uint64_t{1} << 40;
    expect_refused(m.file.bytes(), {"tensor 'output.weight'", "runs past the end of the file"});
  }
  {
    TestModel m = good;  // not aligned
    m.file.offset_override["output.weight"] = 33;
    expect_refused(m.file.bytes(), {"tensor 'output.weight' starts at offset 33, not a multiple of the alignment 32"});
  }
  {
    TestModel m = good;  // a shape the keys do not give
    m.file.tensors[2].ne[1] = 32;
    m.file.tensors[2].data.resize(m.file.tensors[2].data.size() / 2);
    expect_refused(m.file.bytes(), {"tensor 'blk.0.attn_q.weight' has ne {64, 32}, expected {64, 64}"});
  }
  {
    TestModel m = good;  // a row that is not whole blocks
    m.file.tensors[2].ne = {48, 64};
    expect_refused(m.file.bytes(), {"tensor 'blk.0.attn_q.weight' has rows of 48 values, not a whole number of Q4_0 blocks"});
  }
  {
    TestModel m = good;  // a tensor lockstep's llama does not have
    m.file.tensors[5].name = "blk.0.attn_q.bias";
    expect_refused(m.file.bytes(), {"tensor 'blk.0.attn_q.bias' is not one of a llama model"});
  }
  {
    TestModel m = good;  // RoPE divisors of the wrong shape
    m.file.tensors[5].name = "rope_freqs.weight";
    expect_refused(m.file.bytes(), {"tensor 'rope_freqs.weight' is not a vector of 8 values"});
  }
  {
    TestModel m = good;  // a tensor missing
    m.file.tensors.erase(m.file.tensors.begin() + 4);
    expect_refused(m.file.bytes(), {"has no tensor 'blk.0.attn_v.weight'"});
  }
  {
    TestModel m = good;  // a non-finite block scale
    m.file.tensors[2].data[0] = 0x00;
    m.file.tensors[2].data[1] = static_cast<char>(0x7c);  // f16 +inf
    expect_refused(m.file.bytes(), {"tensor 'blk.0.attn_q.weight' block 0 has a non-finite scale"});
  }
  {
    TestGguf g = good.file;  // another architecture
    g.kv.clear();
    g.n_kv = 0;
    g.str("general.architecture", "gemma");
    expect_refused(g.bytes(), {"general.architecture is 'gemma'; lockstep imports 'llama' and 'qwen2'"});
  }
  // A vocabulary lockstep does not convert: said, and --ids-only imports the weights (the
  // conversions and their refusals: tests/text/test_gguf_vocab.py).
  const std::string with_vocab = test_model(false, 4, "bert").file.bytes();
  expect_refused(with_vocab, {"tokenizer.ggml.model 'bert'", "--ids-only"});
  ImportGgufOptions ids_only;
  ids_only.ids_only = true;
  const std::string dir = import_file(tmp, with_vocab, "ids", ids_only);
  EXPECT_STREQ(Model::load(dir)->profile(), int8dot_profile_name());
}

// Llama 3's RoPE scaling, as llama.cpp's converter writes it (convert_hf_to_gguf.py: no key, a
// tensor rope_freqs.weight of each pair's frequency divisor, from f32 frequencies), becomes the
// configuration's rope_scaling (factor 32, low 1, high 4, original context 8192: Llama 3.2's); the
// test model's head dimension 16 and theta 10000 put its 8 pairs in all three of the rule's ranges.
// Divisors that are not that rule's are refused naming the value.
std::string rope_freqs(float factor, double perturb_pair = -1) {
  std::string data;
  for (int i = 0; i < 8; ++i) {
    const float freq = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * i / 16));  // the converter's, in f32
    const double wavelen = 2 * M_PI / freq, L = 8192, low = L / 1, high = L / 4;
    double v = factor;
    if (wavelen < high) v = 1;
    else if (wavelen <= low) {
      const double smooth = (L / wavelen - 1) / (4 - 1);
      v = 1 / ((1 - smooth) / factor + smooth);
    }
    if (i == perturb_pair) v *= 1.01;
    put(data, static_cast<float>(v));
  }
  return data;
}

TEST(GgufImport, RopeFreqsBecomeLlama3Scaling) {
  test::TempDir tmp;
  TestModel m = test_model(false, 6);
  const std::string plain = import_file(tmp, m.file.bytes(), "plain");
  m.file.tensors.push_back({"rope_freqs.weight", {8}, kF32, rope_freqs(32)});
  const std::string scaled = import_file(tmp, m.file.bytes(), "scaled");
  const auto model = Model::load(scaled);
  ASSERT_TRUE(model->config().rope_scaling.has_value());
  EXPECT_EQ(*model->config().rope_scaling, (RopeScaling{32.0f, 1.0f, 4.0f, 8192}));
  EXPECT_FALSE(Model::load(plain)->config().rope_scaling.has_value());
  // The scaled model's tables are Llama 3's: positions past the smooth range's wavelength differ.
  const auto ids = test::random_ids(24, 67, 1);
  EXPECT_NE(model->logits({ids.data(), 1, 24}), Model::load(plain)->logits({ids.data(), 1, 24}));
  // Divisors of all ones: no scaling.
  std::string ones;
  for (int i = 0; i < 8; ++i) put(ones, 1.0f);
  m.file.tensors.back().data = ones;
  EXPECT_FALSE(Model::load(import_file(tmp, m.file.bytes(), "ones"))->config().rope_scaling.has_value());
  // Divisors of another rule: refused, naming the value.
  m.file.tensors.back().data = rope_freqs(32, 6);  // pair 6: the smooth range
  try {
    import_file(tmp, m.file.bytes(), "other");
    ADD_FAILURE() << "imported divisors of another rule";
  } catch (const Error& e) {
    EXPECT_TRUE(has_all(e.what(), {"tensor 'rope_freqs.weight' is not Llama 3's RoPE scaling (factor 32", "value 6 is"}))
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / "other"));
}

// qwen2 is llama with q, k and v biases and its query and key rows (and biases) in NeoX order
// (pair i of a head is i and i + 8 here, head dimension 16), which lockstep puts in adjacent pairs:
// a qwen2 file holding the llama file's q and k rows in NeoX order and zero biases is the llama
// model, bit for bit, through the fast path (its Q4_0 q and k rows reordered as blocks); with
// biases, each lands where its row does.
int64_t neox_row(int64_t j) {  // the file's row of lockstep's output j
  const int64_t h = j / 16, i = (j % 16) / 2, e = j % 2;
  return h * 16 + e * 8 + i;
}

// q, k and v biases of the test model's two layers: element j of layer l is scale * ((7j + 3l) % 11 - 5).
void add_qkv_biases(TestGguf& g, float scale) {
  for (int l = 0; l < 2; ++l)
    for (const auto& [name, n] : std::vector<std::pair<std::string, int>>{{"q", 64}, {"k", 32}, {"v", 32}}) {
      std::string data;
      for (int j = 0; j < n; ++j) put(data, scale * static_cast<float>((j * 7 + l * 3) % 11 - 5));
      g.tensors.push_back({"blk." + std::to_string(l) + ".attn_" + name + ".bias", {static_cast<uint64_t>(n)}, kF32, data});
    }
}

TEST(GgufImport, Qwen2IsLlamaWithBiasesAndNeoxRows) {
  test::TempDir tmp;
  const TestModel llama = test_model(false, 7);
  TestModel qwen = test_model(false, 7, "", 67, "qwen2");
  std::map<std::string, std::string> biases;
  for (TestTensor& t : qwen.file.tensors) {
    if (t.name.find("attn_q.weight") == std::string::npos && t.name.find("attn_k.weight") == std::string::npos) continue;
    const int64_t N = static_cast<int64_t>(t.ne[1]);
    const size_t row = t.data.size() / static_cast<size_t>(N);
    std::string neox(t.data.size(), '\0');
    for (int64_t j = 0; j < N; ++j) neox.replace(static_cast<size_t>(neox_row(j)) * row, row, t.data, static_cast<size_t>(j) * row, row);
    t.data = neox;
  }
  TestGguf zero = qwen.file;
  add_qkv_biases(zero, 0.0f);
  const auto a = Model::load(import_file(tmp, llama.file.bytes(), "llama"));
  const auto b = Model::load(import_file(tmp, zero.bytes(), "qwen2"));
  EXPECT_TRUE(b->config().qkv_bias);
  const auto ids = test::random_ids(2 * 24, 67, 4);
  for (int threads : {1, 3})
    test::expect_same(b->logits({ids.data(), 2, 24}, {}, {Device::cpu, threads}),
                      a->logits({ids.data(), 2, 24}, {}, {Device::cpu, threads}), "qwen2 with zero biases");
  TestGguf biased = qwen.file;
  add_qkv_biases(biased, 0.25f);
  const auto c = Model::load(import_file(tmp, biased.bytes(), "biased"));
  const auto& L = c->registry().layer(1);
  const std::span<const float> p = c->parameters();
  for (int64_t j = 0; j < 64; ++j)
    EXPECT_EQ(p[static_cast<size_t>(L.bq + j)], 0.25f * static_cast<float>((neox_row(j) * 7 + 3) % 11 - 5)) << j;
  for (int64_t j = 0; j < 32; ++j) {
    EXPECT_EQ(p[static_cast<size_t>(L.bk + j)], 0.25f * static_cast<float>((neox_row(j) * 7 + 3) % 11 - 5)) << j;
    EXPECT_EQ(p[static_cast<size_t>(L.bv + j)], 0.25f * static_cast<float>((j * 7 + 3) % 11 - 5)) << j;
  }
  LoadOptions reference;
  reference.device = Device::reference;
  test::expect_same(c->logits({ids.data(), 2, 24}, {}, {Device::cpu, 2}),
                    Model::load(tmp / "biased", reference)->logits({ids.data(), 2, 24}, {}, {Device::reference, std::nullopt}),
                    "qwen2 fast path against the reference");
  // Without its biases, a qwen2 file is refused naming the first missing.
  try {
    import_file(tmp, qwen.file.bytes(), "no_biases");
    ADD_FAILURE() << "imported qwen2 without biases";
  } catch (const Error& e) {
    EXPECT_TRUE(has_all(e.what(), {"has no tensor 'blk.0.attn_q.bias'"})) << e.what();
  }
}

// The file's vocabulary becomes the model's tokenizer, here in every build (the sanitizers' too);
// the conversions against the original tokenizers are tests/text/test_gguf_vocab.py's.
// In a build without the tokenizer a vocabulary converts to, the import is refused saying so, and
// writes nothing.
[[maybe_unused]] void expect_refused_by_build(const test::TempDir& tmp, const std::string& bytes, const std::string& name,
                                              const std::string& why) {
  try {
    import_file(tmp, bytes, name);
    ADD_FAILURE() << name << ": imported in a build without its tokenizer";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(tmp / name)) << name;
}

TEST(GgufImport, TheVocabularyBecomesTheTokenizer) {
  test::TempDir tmp;
  const std::string G = "\xC4\xA0", S = "\xE2\x96\x81";  // byte-level BPE's space; SentencePiece's
  {
    TestModel m = test_model(false, 8);  // gpt2: merges "a b" then "Ġ ab", a control token at 66
    std::vector<std::string> tokens = {"a", "b", "ab", G, G + "ab"};
    std::vector<int32_t> types(67, 5);
    for (int i = 5; i < 66; ++i) tokens.push_back("[PAD" + std::to_string(i) + "]");
    tokens.push_back("<|end|>");
    std::fill(types.begin(), types.begin() + 5, 1);
    types[66] = 3;
    TestGguf& g = m.file;
    g.str("tokenizer.ggml.model", "gpt2");
    g.str("tokenizer.ggml.pre", "gpt-2");
    g.strings("tokenizer.ggml.tokens", tokens);
    g.numbers<int32_t>("tokenizer.ggml.token_type", 5, types);
    g.strings("tokenizer.ggml.merges", {"a b", G + " ab"});
    g.u32("tokenizer.ggml.eos_token_id", 66);
    g.str("tokenizer.chat_template", "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}");
#ifdef LOCKSTEP_TEST_NO_HF_TOKENIZER  // this build cannot read the tokenizer.json it would write
    expect_refused_by_build(tmp, g.bytes(), "gpt2", "built without Hugging Face tokenizers");
#else
    const std::string dir = import_file(tmp, g.bytes(), "gpt2");
    const auto tok = Tokenizer::for_model(dir);
    ASSERT_NE(tok, nullptr);
    EXPECT_STREQ(tok->type(), "huggingface");
    EXPECT_EQ(tok->encode(" ab abab<|end|>", false), (std::vector<int32_t>{4, 4, 2, 66}));
    EXPECT_EQ(tok->decode(std::vector<int32_t>{4, 2, 66}), " abab");  // a special token decodes to nothing
    EXPECT_EQ(ChatTemplate::for_model(dir)->eos_token(), "<|end|>");
    const auto model = Model::load(dir);
    EXPECT_EQ(std::vector<int32_t>(model->eos_token_ids().begin(), model->eos_token_ids().end()), std::vector<int32_t>{66});
#endif
  }
  {
    TestModel m = test_model(false, 9);  // llama: SentencePiece pieces whose scores order the merges
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", S, "a", "b", S + "a", "ab", S + "ab"};
    std::vector<float> scores = {0, 0, 0, -3, -4, -5, -1, -2, -0.5f};
    std::vector<int32_t> types = {2, 3, 3, 1, 1, 1, 1, 1, 1};
    for (int i = 9; i < 67; ++i) tokens.push_back("[PAD" + std::to_string(i) + "]"), scores.push_back(-1000), types.push_back(5);
    TestGguf& g = m.file;
    g.str("tokenizer.ggml.model", "llama");
    g.strings("tokenizer.ggml.tokens", tokens);
    g.numbers<float>("tokenizer.ggml.scores", 6, scores);
    g.numbers<int32_t>("tokenizer.ggml.token_type", 5, types);
    g.u32("tokenizer.ggml.bos_token_id", 1);
    g.u32("tokenizer.ggml.eos_token_id", 2);
#ifdef LOCKSTEP_TEST_NO_SENTENCEPIECE  // this build cannot read the tokenizer.model it would write
    expect_refused_by_build(tmp, g.bytes(), "llama", "built without SentencePiece");
#else
    const std::string dir = import_file(tmp, g.bytes(), "llama");
    const auto tok = Tokenizer::for_model(dir);
    ASSERT_NE(tok, nullptr);
    EXPECT_STREQ(tok->type(), "sentencepiece");
    EXPECT_EQ(tok->encode("ab", true), (std::vector<int32_t>{1, 8}));  // ▁a (-1) first, then ▁ab (-0.5)
    EXPECT_EQ(tok->encode("a b", false), (std::vector<int32_t>{6, 3, 5}));
    EXPECT_EQ(tok->decode(std::vector<int32_t>{1, 8, 6}), "ab a");
#endif
  }
}

// export-gguf of an imported int8dot model writes the very blocks it computes from (a byte-level
// model: export-gguf needs token strings, which a vocabulary of 256 bytes has).
TEST(GgufImport, ExportWritesTheSameBlocks) {
  test::TempDir tmp;
  const TestModel m = test_model(false, 6, "", 256);
  const std::string dir = import_file(tmp, m.file.bytes(), "bytes");
  const GgufResult r = export_gguf(dir, tmp / "again.gguf", GgufOptions{"f32", "again"});
  EXPECT_EQ(r.tensors, static_cast<int64_t>(m.file.tensors.size()));
  const std::string again = test::read_file(tmp / "again.gguf");
  test::expect_holds_tensors(again, m.file.tensors, "again.gguf");
  // And it imports again (its 256 byte strings without merges are the byte vocabulary) to the same logits.
  const std::string dir2 = import_file(tmp, again, "bytes2");
  EXPECT_EQ(Tokenizer::for_model(dir2), nullptr);
  const auto ids = test::random_ids(24, 256, 8);
  EXPECT_TRUE(test::same_bits(Model::load(dir)->logits({ids.data(), 1, 24}), Model::load(dir2)->logits({ids.data(), 1, 24})));
}

// Export writes a qwen2 model back as llama.cpp's qwen2 architecture (its query and key rows, in
// blocks here, and their biases in NeoX order again: every tensor the file's own bytes) and Llama
// 3's scaling as rope_freqs again (the converter's divisors, to f32 rounding).
TEST(GgufImport, ExportWritesQwen2AndLlama3ScalingBack) {
  test::TempDir tmp;
  auto tensors_of = [](const std::string& bytes, const std::string& what) {
    return format::parse_gguf(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), what);
  };
  TestModel qwen = test_model(false, 9, "", 256, "qwen2");
  add_qkv_biases(qwen.file, 0.5f);
  const GgufResult r = export_gguf(import_file(tmp, qwen.file.bytes(), "qwen2"), tmp / "qwen2_again.gguf", GgufOptions{"f32", "q"});
  EXPECT_EQ(r.architecture, "qwen2");
  const std::string again = test::read_file(tmp / "qwen2_again.gguf");
  const format::GgufFile f = test::expect_holds_tensors(again, qwen.file.tensors, "qwen2_again.gguf");
  ASSERT_EQ(f.tensors.size(), qwen.file.tensors.size());
  EXPECT_EQ(f.find("general.architecture")->text, "qwen2");
  EXPECT_NE(f.find("qwen2.embedding_length"), nullptr);

  TestModel llama3 = test_model(false, 10, "", 256);
  llama3.file.tensors.push_back({"rope_freqs.weight", {8}, kF32, rope_freqs(32)});
  const std::string dir = import_file(tmp, llama3.file.bytes(), "llama3");
  export_gguf(dir, tmp / "llama3_again.gguf", GgufOptions{"f32", "l"});
  const std::string l3 = test::read_file(tmp / "llama3_again.gguf");
  const format::GgufFile g = tensors_of(l3, "llama3_again.gguf");
  const auto rf = std::find_if(g.tensors.begin(), g.tensors.end(), [](const format::GgufTensor& t) { return t.name == "rope_freqs.weight"; });
  ASSERT_NE(rf, g.tensors.end());
  ASSERT_EQ(rf->ne, std::vector<uint64_t>{8});
  const std::string want = rope_freqs(32);
  for (int i = 0; i < 8; ++i) {
    float a, b;
    std::memcpy(&a, rf->data + 4 * i, 4);
    std::memcpy(&b, want.data() + 4 * i, 4);
    EXPECT_NEAR(a, b, 1e-6 * b) << i;
  }
  EXPECT_EQ(Model::load(import_file(tmp, l3, "llama3_again"))->config().rope_scaling, Model::load(dir)->config().rope_scaling);
}

}  // namespace
}  // namespace lockstep
