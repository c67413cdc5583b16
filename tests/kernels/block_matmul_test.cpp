// The profiles lockstep-int8dot-1's and -2's kernels (docs/ARITHMETIC.md, "The profile
// lockstep-int8dot-1", "K-quant matrices in integers"): the reference's activation quantization
// and block layouts against hand-worked cases of the text, the reference against a float64 sum
// of the same values, and every target's integer matmul (vector and scalar) against the
// reference with memcmp over odd shapes, every block type (the K-quants included) and mixes of
// them, batches of 1 to 9 rows and the groups split among 1, 2, 3 and 7 workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#if defined(__aarch64__)
#include <sys/auxv.h>  // getauxval, HWCAP_ASIMDDP
#endif

#include "core/thread_pool.hpp"
#include "kernels/ref/blocks.hpp"
#include "kernels/simd/block_matrix.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using quant::BlockType;
constexpr BlockType kScaledTypes[] = {BlockType::q8_0, BlockType::q4_0, BlockType::q5_0};  // one f16 a block
constexpr BlockType kTypes[] = {BlockType::q8_0, BlockType::q4_0, BlockType::q5_0,
                                BlockType::q4_k, BlockType::q5_k, BlockType::q6_k};

// A random f16 scale: a normal value of either sign around 2^-6, now and then zero or subnormal.
uint16_t random_scale(uint64_t r) {
  uint16_t h = static_cast<uint16_t>(((r & 1) << 15) | ((5 + (r >> 1) % 12) << 10) | ((r >> 8) & 0x3ff));
  if ((r >> 20) % 29 == 0) h = 0;
  if ((r >> 20) % 31 == 1) h = static_cast<uint16_t>((r >> 30) & 0x3ff);  // subnormal
  return h;
}

// N rows of K inputs in `type`'s blocks, every byte random but the scales: normal f16 values of
// either sign around 2^-6, with a zero scale and an f16 subnormal now and then. Q8_0's random
// bytes include -128, which outside files hold.
std::vector<uint8_t> random_rows(BlockType type, int64_t K, int64_t N, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> out(static_cast<size_t>(N * quant::block_row_bytes(type, K)));
  for (uint8_t& byte : out) byte = static_cast<uint8_t>(rng());
  auto put = [&](size_t at) {
    const uint16_t h = random_scale(rng());
    out[at] = static_cast<uint8_t>(h & 0xff);
    out[at + 1] = static_cast<uint8_t>(h >> 8);
  };
  if (quant::is_k_quant(type)) {  // super-blocks: d and dmin (Q4_K, Q5_K) or d (Q6_K, at byte 208)
    const auto k = static_cast<quant::KQuantType>(type);
    const size_t bytes = static_cast<size_t>(quant::super_block_bytes(k));
    for (size_t at = 0; at < out.size(); at += bytes) {
      if (k == quant::KQuantType::q6_k) {
        put(at + 208);
      } else {
        put(at);
        put(at + 2);
      }
    }
    return out;
  }
  const int64_t bytes = quant::block_bytes(type);
  for (size_t at = 0; at < out.size(); at += static_cast<size_t>(bytes)) put(at);
  return out;
}

// Activations [M, K] with the cases the quantization rule singles out: an all-zero block (scale
// 0), a block of half-integers, and a tiny block of subnormals (a subnormal scale).
std::vector<float> activations(int64_t M, int64_t K, uint64_t seed) {
  std::vector<float> x = test::random_floats(M * K, seed);
  for (int64_t m = 0; m < M; ++m) {
    const int64_t blocks = K / 32;
    if (blocks > 1) std::fill_n(x.begin() + m * K + 32, 32, 0.0f);
    if (blocks > 2)
      for (int j = 0; j < 32; ++j) x[static_cast<size_t>(m * K + 64 + j)] = static_cast<float>(j * 4 - 63) * 0.5f;
    if (blocks > 3)
      for (int j = 0; j < 32; ++j) x[static_cast<size_t>(m * K + 96 + j)] = std::bit_cast<float>(uint32_t(j * 7));
  }
  return x;
}

TEST(BlockQuantization, FollowsTheTextOnHandWorkedBlocks) {
  float x[32], dx[1];
  int8_t q[32];
  // amax 127: d = 1, so q = round-half-even(x): ties go to the even integer.
  for (int j = 0; j < 32; ++j) x[j] = 0.0f;
  x[0] = 127.0f;
  x[1] = 2.5f;
  x[2] = 3.5f;
  x[3] = -2.5f;
  x[4] = -0.5f;
  x[5] = 0.5f;
  x[6] = -127.0f;
  x[7] = 1.49999988f;
  ref::quantize_activations(x, 32, q, dx);
  EXPECT_EQ(dx[0], 1.0f);
  const int8_t want[] = {127, 2, 4, -2, 0, 0, -127, 1};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(q[j], want[j]) << "element " << j;
  // An all-zero block: scale 0, every q 0.
  for (float& v : x) v = 0.0f;
  ref::quantize_activations(x, 32, q, dx);
  EXPECT_EQ(dx[0], 0.0f);
  for (int8_t v : q) EXPECT_EQ(v, 0);
  // A subnormal block: amax = 190 * 2^-149, d = round(190 / 127) = 1 * 2^-149, so amax / d = 190,
  // clamped to 127; a block so small that amax / 127 rounds to 0 quantizes to zeros.
  x[0] = std::bit_cast<float>(uint32_t{190});
  x[1] = -std::bit_cast<float>(uint32_t{190});
  ref::quantize_activations(x, 32, q, dx);
  EXPECT_EQ(std::bit_cast<uint32_t>(dx[0]), 1u);
  EXPECT_EQ(q[0], 127);
  EXPECT_EQ(q[1], -127);
  x[0] = std::bit_cast<float>(uint32_t{63});
  x[1] = 0.0f;
  ref::quantize_activations(x, 32, q, dx);
  EXPECT_EQ(dx[0], 0.0f);
  EXPECT_EQ(q[0], 0);
  // The scale is one divide: amax / 127 (0.1 / 127 rounds once), and q one divide by it.
  for (int j = 0; j < 32; ++j) x[j] = 0.1f * static_cast<float>(j - 16) / 16.0f;
  ref::quantize_activations(x, 32, q, dx);
  EXPECT_EQ(dx[0], 0.1f / 127.0f);
  for (int j = 0; j < 32; ++j) {
    const float r = std::nearbyint(x[j] / dx[0]);
    EXPECT_EQ(q[j], static_cast<int8_t>(r)) << j;
  }
}

// Every target's quantization of activations gives the reference's integers and scales: rows of
// random values and the blocks the rule singles out (all zero, ties, subnormals, a subnormal scale
// whose quotients pass 127), rows read with a stride wider than K, K from one block to 25.
TEST(BlockQuantization, EveryTargetEqualsTheReference) {
  int checked = 0;
  uint64_t seed = 39500;
  for (const simd::Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;
    for (int64_t K : {32, 64, 96, 128, 160, 800}) {
      for (int64_t M : {1, 2, 5}) {
        const int64_t lda = K + 7;
        std::vector<float> x = activations(M, lda, seed++);
        for (int64_t m = 0; m < M; ++m) {  // a subnormal scale rounded down: quotients up to 190
          x[static_cast<size_t>(m * lda)] = std::bit_cast<float>(uint32_t{190});
          for (int64_t j = 1; j < std::min<int64_t>(K, 32); ++j)
            x[static_cast<size_t>(m * lda + j)] = std::bit_cast<float>(static_cast<uint32_t>(j * 6)) * (j % 2 ? -1.0f : 1.0f);
        }
        std::vector<int8_t> want_q(static_cast<size_t>(M * K)), got_q(want_q.size(), 99);
        std::vector<float> want_d(static_cast<size_t>(M * K / 32)), got_d(want_d.size(), -1.0f);
        for (int64_t m = 0; m < M; ++m)
          ref::quantize_activations(x.data() + m * lda, K, want_q.data() + m * K, want_d.data() + m * K / 32);
        k->quantize_activations(x.data(), lda, M, K, got_q.data(), got_d.data());
        const std::string what = std::string(k->name) + " K=" + std::to_string(K) + " M=" + std::to_string(M);
        ASSERT_EQ(std::memcmp(got_q.data(), want_q.data(), want_q.size()), 0) << what;
        test::expect_same(got_d, want_d, what);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(BlockLayouts, ValuesFollowGgufsBitOrder) {
  uint8_t block[34] = {};
  int8_t v[32];
  // Scale: f16 0x3c00 = 1.0.
  block[0] = 0x00;
  block[1] = 0x3c;
  EXPECT_EQ(quant::block_scale(block), 1.0f);
  // Q4_0: byte j low nibble = element j, high nibble = element j + 16, minus 8.
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>((j & 15) | ((15 - j) << 4));
  quant::block_values(BlockType::q4_0, block, v);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], j - 8);
    EXPECT_EQ(v[j + 16], 7 - j);
  }
  // Q5_0: qh (little-endian u32) bit j is element j's bit 4, then the nibbles as Q4_0's, minus 16.
  const uint32_t qh = 0x80000001u;  // elements 0 and 31
  for (int i = 0; i < 4; ++i) block[2 + i] = static_cast<uint8_t>(qh >> (8 * i));
  for (int j = 0; j < 16; ++j) block[6 + j] = 0x00;
  block[6] = 0x0f;
  block[6 + 15] = 0xf0;
  quant::block_values(BlockType::q5_0, block, v);
  EXPECT_EQ(v[0], 15);    // 16 | 15 - 16
  EXPECT_EQ(v[16], -16);  // 0 - 16
  EXPECT_EQ(v[15], -16);
  EXPECT_EQ(v[31], 15);   // 16 | 15 - 16
  EXPECT_EQ(v[1], -16);
  // Q8_0: the bytes as int8, -128 included.
  for (int j = 0; j < 32; ++j) block[2 + j] = static_cast<uint8_t>(j == 0 ? 0x80 : j);
  quant::block_values(BlockType::q8_0, block, v);
  EXPECT_EQ(v[0], -128);
  EXPECT_EQ(v[5], 5);
  EXPECT_EQ(quant::block_type_of(8, false), BlockType::q8_0);
  EXPECT_EQ(quant::block_type_of(2, false), BlockType::q4_0);
  EXPECT_EQ(quant::block_type_of(6, false), BlockType::q5_0);
  EXPECT_FALSE(quant::block_type_of(12, false).has_value());  // Q4_K: widened under lockstep-int8dot-1
  EXPECT_EQ(quant::block_type_of(12, true), BlockType::q4_k);
  EXPECT_EQ(quant::block_type_of(13, true), BlockType::q5_k);
  EXPECT_EQ(quant::block_type_of(14, true), BlockType::q6_k);
  EXPECT_FALSE(quant::block_type_of(10, true).has_value());  // Q2_K
}

// The reference's chain is sum_b dw * dx * isum rounded step by step: within a few f32 ulps of
// the whole sum in float64 over the same integers (never far from it, never another function).
// For the K-quants the float64 sum is over the widened values (quant::widen_super_block, checked
// against a decoder after ggml's own in gguf_k_quants_test) times the quantized activations: the
// integer form and the widened values are one matrix.
TEST(BlockMatmulReference, CloseToFloat64SumOfTheSameIntegers) {
  const int64_t M = 3, K = 512, N = 20;
  for (BlockType type : kTypes) {
    const auto w = random_rows(type, K, N, 7 + static_cast<uint64_t>(type));
    const auto x = activations(M, K, 11);
    std::vector<float> y(static_cast<size_t>(M * N));
    ref::matmul_blocks(x.data(), w.data(), type, y.data(), M, K, N);
    std::vector<int8_t> qx(static_cast<size_t>(M * K));
    std::vector<float> dx(static_cast<size_t>(M * K / 32));
    for (int64_t m = 0; m < M; ++m) ref::quantize_activations(x.data() + m * K, K, qx.data() + m * K, dx.data() + m * K / 32);
    int8_t v[32];
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double sum = 0, mag = 0;
        if (quant::is_k_quant(type)) {
          const auto k = static_cast<quant::KQuantType>(type);
          std::vector<float> row(static_cast<size_t>(K));
          for (int64_t s = 0; s < K / 256; ++s)
            quant::widen_super_block(k, w.data() + (n * K / 256 + s) * quant::super_block_bytes(k), row.data() + s * 256);
          for (int64_t i = 0; i < K; ++i) {
            const double t = double(row[static_cast<size_t>(i)]) * double(dx[static_cast<size_t>(m * K / 32 + i / 32)]) *
                             double(qx[static_cast<size_t>(m * K + i)]);
            sum += t;
            mag += std::fabs(t);
          }
        }
        for (int64_t b = 0; b < K / 32 && !quant::is_k_quant(type); ++b) {
          const uint8_t* block = w.data() + (n * K / 32 + b) * quant::block_bytes(type);
          quant::block_values(type, block, v);
          int64_t isum = 0;
          for (int j = 0; j < 32; ++j) isum += int64_t{v[j]} * qx[static_cast<size_t>(m * K + b * 32 + j)];
          const double t = double(quant::block_scale(block)) * double(dx[static_cast<size_t>(m * K / 32 + b)]) * double(isum);
          sum += t;
          mag += std::fabs(t);
        }
        EXPECT_NEAR(y[static_cast<size_t>(m * N + n)], sum, 1e-6 * mag + 1e-30) << quant::block_type_name(type);
      }
    }
  }
}

// The rows of a concatenation of parts, each with its own type, quantized and computed by the
// reference part by part: y [M, N_total].
struct Case {
  std::vector<std::vector<uint8_t>> rows;
  std::vector<simd::BlockPart> parts;
  int64_t N = 0;
};

Case make_case(const std::vector<std::pair<BlockType, int64_t>>& parts, int64_t K, uint64_t seed) {
  Case c;
  c.rows.reserve(parts.size());
  for (const auto& [type, n] : parts) {
    c.rows.push_back(random_rows(type, K, n, seed++));
    c.parts.push_back({c.rows.back().data(), type, n});
    c.N += n;
  }
  return c;
}

std::vector<float> reference(const Case& c, const int8_t* qx, const float* dx, int64_t M, int64_t K) {
  std::vector<float> y(static_cast<size_t>(M * c.N));
  int64_t col = 0;
  for (const simd::BlockPart& p : c.parts) {
    std::vector<float> part(static_cast<size_t>(M * p.N));
    ref::matmul_blocks_quantized(qx, dx, p.rows, p.type, part.data(), M, K, p.N);
    for (int64_t m = 0; m < M; ++m)
      std::copy_n(part.begin() + m * p.N, p.N, y.begin() + m * c.N + col);
    col += p.N;
  }
  return y;
}

TEST(BlockMatmul, EveryTargetEqualsReferenceOverShapesBatchesAndThreads) {
  const std::vector<std::vector<std::pair<BlockType, int64_t>>> layouts = {
      {{BlockType::q8_0, 1}},   {{BlockType::q8_0, 61}}, {{BlockType::q4_0, 8}},
      {{BlockType::q4_0, 67}},  {{BlockType::q5_0, 17}}, {{BlockType::q5_0, 40}},
      {{BlockType::q4_0, 13}, {BlockType::q4_0, 7}, {BlockType::q4_0, 9}},   // fused, all Q4_0: nibbles kept
      {{BlockType::q4_0, 24}, {BlockType::q8_0, 5}, {BlockType::q5_0, 11}},  // a mix: widened to int8
      {{BlockType::q4_k, 9}},   {{BlockType::q5_k, 17}}, {{BlockType::q6_k, 8}},
      {{BlockType::q4_k, 13}, {BlockType::q4_k, 7}, {BlockType::q6_k, 9}},   // fused K-quants: each lane its form
      {{BlockType::q6_k, 3}, {BlockType::q5_k, 1}, {BlockType::q4_k, 20}},
  };
  const auto all = simd::supported_kernels();
  ThreadPool pool(7);  // workers started once: starting threads for each case is most of the time under qemu
  uint64_t seed = 39000;
  int checked = 0;
  std::string targets;  // what was checked, printed at the end
  for (const simd::Kernels* k : all) {
    if (!test::target_under_test(k->name)) continue;
    const std::string kernel = k->matmul_blocks_kernel;
    targets += std::string(targets.empty() ? "" : ", ") + k->name + " (" + (kernel == "scalar" ? "" : kernel + ", ") +
               "scalar)";
    for (const auto& layout : layouts) {
      const bool k_quants = quant::is_k_quant(layout[0].first);
      for (int64_t K : k_quants ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 160, 800}) {
        const Case c = make_case(layout, K, seed);
        seed += 10;
        const simd::BlockMatrix w = simd::pack_blocks(c.parts.data(), static_cast<int>(c.parts.size()), K);
        for (int64_t M : {1, 2, 3, 4, 5, 7, 9}) {
          const auto x = activations(M, K, seed++);
          std::vector<int8_t> qx(static_cast<size_t>(M * K));
          std::vector<float> dx(static_cast<size_t>(M * K / 32));
          for (int64_t m = 0; m < M; ++m)
            ref::quantize_activations(x.data() + m * K, K, qx.data() + m * K, dx.data() + m * K / 32);
          const std::vector<float> want = reference(c, qx.data(), dx.data(), M, K);
          for (int threads : {1, 2, 3, 7}) {
            for (auto kernel : {k->matmul_blocks, k->matmul_blocks_scalar}) {
              std::vector<float> got(want.size(), -1.0f);
              pool.run(threads, [&](int t, int n) {
                const auto [g0, g1] = static_range(w.groups, t, n);
                kernel(qx.data(), dx.data(), M, w, g0, g1, got.data(), c.N);
              });
              const std::string what = std::string(k->name) + " " +
                                       (kernel == k->matmul_blocks ? k->matmul_blocks_kernel : "scalar") +
                                       " " + quant::block_type_name(layout[0].first) + " parts " +
                                       std::to_string(layout.size()) + " K=" + std::to_string(K) + " N=" +
                                       std::to_string(c.N) + " M=" + std::to_string(M) + " threads " +
                                       std::to_string(threads);
              test::expect_same(got, want, what);
              if (HasFailure()) return;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 0);
  std::printf("BlockMatmul: checked %s\n", targets.c_str());
}

// The integer dot product each table chose is the one the CPU has, and the vector kernel is not
// the scalar one: a fast kernel the dispatch silently left out fails here. On Arm the NEON table
// takes sdot where the kernel reports dotprod (HWCAP_ASIMDDP) and widening multiplies otherwise;
// every SVE table takes sdot. LOCKSTEP_EXPECT_BLOCK_KERNELS ("TARGET=kernel,...", e.g.
// "NEON=neon sdot") names choices the run must see, tables under test: the Arm stage sets it per
// emulated CPU, so a CPU that stopped reporting the instruction would fail rather than pass on
// the other kernel.
TEST(BlockMatmul, EachTargetRunsTheCpusIntegerDotProduct) {
  std::vector<std::string> seen;  // "TARGET=kernel"
  for (const simd::Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;
    const std::string name = k->name, kernel = k->matmul_blocks_kernel;
    seen.push_back(name + "=" + kernel);
    std::string want = "scalar";
#if defined(__aarch64__)
    if (name == "NEON") want = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0 ? "neon sdot" : "neon widening";
    if (name.starts_with("SVE")) want = "sve sdot";
#elif defined(__x86_64__)
    if (name == "AVX2") want = "avx2 maddubs";
    if (name == "AVX3" || name == "AVX3_DL")
      want = __builtin_cpu_supports("avx512vnni") ? "avx512 vnni" : "avx2 maddubs";
#endif
    EXPECT_EQ(kernel, want) << name;
    if (want != "scalar") {
      EXPECT_NE(k->matmul_blocks, k->matmul_blocks_scalar) << name;
    }
  }
  std::string listed;
  for (const std::string& one : seen) listed += (listed.empty() ? "" : ", ") + one;
  std::printf("BlockMatmul: kernels %s\n", listed.c_str());
  if (const char* expect = std::getenv("LOCKSTEP_EXPECT_BLOCK_KERNELS")) {
    const std::string list = expect;
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      const std::string one = list.substr(at, comma - at);
      EXPECT_TRUE(std::find(seen.begin(), seen.end(), one) != seen.end())
          << "LOCKSTEP_EXPECT_BLOCK_KERNELS wants " << one << "; this run has " << listed;
      at = comma + 1;
    }
  }
}

// The weights are kept as the file holds them: the packed matrix's integers and scales are the
// blocks' own, -128 included, Q4_0's as nibbles, the scales' f16 bits.
TEST(BlockMatmul, PackingKeepsTheFilesIntegersAndScales) {
  for (BlockType type : kScaledTypes) {
    const int64_t K = 64, N = 11;
    const auto rows = random_rows(type, K, N, 5);
    const simd::BlockPart part{rows.data(), type, N};
    const simd::BlockMatrix w = simd::pack_blocks(&part, 1, K);
    EXPECT_EQ(w.nibbles, type == BlockType::q4_0);
    EXPECT_EQ(w.data.size(), size_t{2} * 2 * ((w.nibbles ? 128 : 256) + 16));  // 2 groups of 2 blocks
    int8_t v[32];
    for (int64_t n = 0; n < 16; ++n) {
      const int64_t g = n / simd::kBlockGroup;
      const int j = static_cast<int>(n % simd::kBlockGroup);
      for (int64_t b = 0; b < K / 32; ++b) {
        if (n >= N) {  // past N: zeros
          EXPECT_EQ(w.scale(g, b, j), 0.0f);
          for (int k = 0; k < 32; ++k) EXPECT_EQ(w.value(g, b, j, k), 0);
          continue;
        }
        const uint8_t* block = rows.data() + (n * K / 32 + b) * quant::block_bytes(type);
        EXPECT_EQ(std::bit_cast<uint32_t>(w.scale(g, b, j)), std::bit_cast<uint32_t>(quant::block_scale(block)));
        quant::block_values(type, block, v);
        for (int k = 0; k < 32; ++k)
          EXPECT_EQ(w.value(g, b, j, k), v[k]) << quant::block_type_name(type) << " n " << n << " k " << k;
      }
    }
  }
}

// K-quants: the packed integers are quant::k_quant_block's (Q4_K's in nibbles), the coefficients
// its exact products, the form minus_min for Q4_K and Q5_K and halves for Q6_K; past N all zero.
TEST(BlockMatmul, PackingKQuantsKeepsTheirIntegersAndCoefficients) {
  for (BlockType type : {BlockType::q4_k, BlockType::q5_k, BlockType::q6_k}) {
    const auto k = static_cast<quant::KQuantType>(type);
    const int64_t K = 512, N = 11;
    const auto rows = random_rows(type, K, N, 6);
    const simd::BlockPart part{rows.data(), type, N};
    const simd::BlockMatrix w = simd::pack_blocks(&part, 1, K);
    EXPECT_TRUE(w.k_quants);
    EXPECT_EQ(w.nibbles, type == BlockType::q4_k);
    // 2 groups of 2 super-blocks: a header of 40 bytes, 8 records of integers and 16 scale bytes
    EXPECT_EQ(w.data.size(), size_t{2} * 2 * (40 + 8 * ((w.nibbles ? 128 : 256) + 16)));
    quant::KQuantBlock kb;
    for (int64_t n = 0; n < 16; ++n) {
      const int64_t g = n / simd::kBlockGroup;
      const int j = static_cast<int>(n % simd::kBlockGroup);
      for (int64_t b = 0; b < K / 32; ++b) {
        if (n >= N) {
          EXPECT_EQ(w.c1(g, b, j), 0.0f);
          EXPECT_EQ(w.c2(g, b, j), 0.0f);
          for (int i = 0; i < 32; ++i) EXPECT_EQ(w.value(g, b, j, i), 0);
          continue;
        }
        quant::k_quant_block(k, rows.data() + (n * K / 256 + b / 8) * quant::super_block_bytes(k), static_cast<int>(b % 8), kb);
        EXPECT_EQ(std::bit_cast<uint32_t>(w.c1(g, b, j)), std::bit_cast<uint32_t>(kb.c1()));
        EXPECT_EQ(std::bit_cast<uint32_t>(w.c2(g, b, j)), std::bit_cast<uint32_t>(kb.c2()));
        EXPECT_EQ(w.minus_min(g, b, j), !kb.halves);
        for (int i = 0; i < 32; ++i)
          EXPECT_EQ(w.value(g, b, j, i), kb.q[i]) << quant::block_type_name(type) << " n " << n << " k " << i;
      }
    }
  }
}

// The integers and coefficients of a K-quant sub-block by the text, on hand-made super-blocks.
TEST(BlockLayouts, KQuantBlocksFollowTheText) {
  quant::KQuantBlock kb;
  // Q4_K: d = 1, dmin = 0.5; sub-block 5's scale and minimum: low nibbles of byte 9 (scale) and
  // high nibble (minimum), top bits from bytes 1 and 5: scale 3 | (1 << 4) = 19, min 2 | (2 << 4) = 34.
  std::vector<uint8_t> q4(144, 0);
  q4[0] = 0x00, q4[1] = 0x3c;  // d 1.0
  q4[2] = 0x00, q4[3] = 0x38;  // dmin 0.5
  q4[4 + 1] = 0x40;            // top bits of sub-block 5's scale: 01
  q4[4 + 5] = 0x80;            // top bits of its minimum: 10
  q4[4 + 9] = 0x23;            // scale low 3, minimum low 2
  for (int l = 0; l < 32; ++l) q4[16 + 64 + l] = static_cast<uint8_t>((l % 16) << 4 | 7);  // sub-block 5: high nibbles
  quant::k_quant_block(quant::KQuantType::q4_k, q4.data(), 5, kb);
  EXPECT_FALSE(kb.halves);
  EXPECT_EQ(kb.c1(), 19.0f);
  EXPECT_EQ(kb.c2(), -17.0f);  // -(0.5 * 34)
  for (int l = 0; l < 32; ++l) EXPECT_EQ(kb.q[l], l % 16) << l;
  quant::k_quant_block(quant::KQuantType::q4_k, q4.data(), 4, kb);  // the low nibbles: 7
  EXPECT_EQ(kb.q[0], 7);
  // Q6_K: d = 2; sub-block 3 (inputs 96-127: h 0, quarter 3) takes the high nibbles of
  // ql[32 + l] and bits 6-7 of qh[l]; its scales are sc[6] and sc[7].
  std::vector<uint8_t> q6(210, 0);
  q6[208] = 0x00, q6[209] = 0x40;  // d 2.0
  q6[192 + 6] = static_cast<uint8_t>(-3);
  q6[192 + 7] = 5;
  for (int l = 0; l < 32; ++l) {
    q6[32 + l] = static_cast<uint8_t>((l % 16) << 4);
    q6[128 + l] = static_cast<uint8_t>((l % 4) << 6);
  }
  quant::k_quant_block(quant::KQuantType::q6_k, q6.data(), 3, kb);
  EXPECT_TRUE(kb.halves);
  EXPECT_EQ(kb.c1(), -6.0f);
  EXPECT_EQ(kb.c2(), 10.0f);
  for (int l = 0; l < 32; ++l) EXPECT_EQ(kb.q[l], ((l % 16) | ((l % 4) << 4)) - 32) << l;
}

// The embedding lookup: dw * float(w), one multiply each; a K-quant row's values as widened.
TEST(BlockEmbedding, DequantizesWithOneMultiply) {
  for (BlockType type : {BlockType::q4_k, BlockType::q5_k, BlockType::q6_k}) {
    const auto row = random_rows(type, 512, 1, 4);
    std::vector<float> out(512), want(512);
    ref::embed_blocks(row.data(), type, 512, out.data());
    const auto k = static_cast<quant::KQuantType>(type);
    for (int s = 0; s < 2; ++s)
      quant::widen_super_block(k, row.data() + s * quant::super_block_bytes(k), want.data() + s * 256);
    test::expect_same(out, want, quant::block_type_name(type));
  }
  for (BlockType type : kScaledTypes) {
    const auto row = random_rows(type, 96, 1, 3);
    std::vector<float> out(96);
    ref::embed_blocks(row.data(), type, 96, out.data());
    int8_t v[32];
    for (int b = 0; b < 3; ++b) {
      const uint8_t* block = row.data() + b * quant::block_bytes(type);
      quant::block_values(type, block, v);
      for (int j = 0; j < 32; ++j)
        EXPECT_EQ(out[static_cast<size_t>(b * 32 + j)], quant::block_scale(block) * static_cast<float>(v[j]));
    }
  }
}

}  // namespace
}  // namespace lockstep
