// Every fast kernel against its reference twin, with memcmp, for every SIMD target this machine
// runs (the portable fallback included), over shapes chosen around the vector width: 1, primes,
// odd sizes, multiples of the lane count and their neighbours.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "support/blocked_keys.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

// Every target this machine runs, or those LOCKSTEP_TEST_TARGETS names (test_util.hpp).
std::vector<const Kernels*> targets() {
  std::vector<const Kernels*> out;
  for (const Kernels* k : simd::supported_kernels())
    if (test::target_under_test(k->name)) out.push_back(k);
  return out;
}

// Every target this machine runs, whatever LOCKSTEP_TEST_TARGETS says.
std::string target_names() {
  std::string s;
  for (const Kernels* k : simd::supported_kernels()) s += std::string(s.empty() ? "" : ", ") + k->name;
  return s;
}

using test::expect_same;

const int kSizes[] = {1, 2, 3, 5, 7, 8, 9, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 49, 64, 100, 257};

TEST(Targets, ThereIsAlwaysAPortableFallbackLast) {
  const auto all = simd::supported_kernels();
  ASSERT_FALSE(all.empty());
  EXPECT_STREQ(all.back()->name, "portable") << target_names();
  std::printf("SIMD targets on this machine: %s\n", target_names().c_str());
}

// One matmul of random [M, K] @ [K, N] (seeds `seed` and `seed + 1`) against ref::matmul.
void check_matmul(const Kernels& k, int M, int K, int N, uint64_t seed) {
  const auto a = test::random_floats(int64_t{M} * K, seed);
  const auto w = test::random_floats(int64_t{K} * N, seed + 1);
  std::vector<float> want(static_cast<size_t>(M) * N);
  ref::matmul(a.data(), w.data(), want.data(), M, K, N);
  const simd::PackedMatrix packed = simd::pack_matrix(k, w.data(), K, N, N);
  std::vector<float> got(want.size(), -1.0f);
  k.matmul(a.data(), K, M, packed, 0, packed.panels, got.data(), N);
  expect_same(got, want,
              std::string(k.name) + " matmul M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N));
}

TEST(Matmul, EqualsReferenceForEveryShapeAndTarget) {
  const int Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13};
  const int Ks[] = {1, 2, 3, 7, 8, 17, 64, 255, 256, 257, 300};
  const int Ns[] = {1, 3, 7, 8, 9, 16, 23, 24, 25, 31, 32, 33, 47, 48, 49, 100};
  uint64_t seed = 1;
  for (const Kernels* k : targets()) {
    for (int M : Ms) {
      for (int K : Ks) {
        for (int N : Ns) {
          check_matmul(*k, M, K, N, seed);
          seed += 2;
        }
      }
    }
  }
}

TEST(Matmul, Bf16WeightsHeldAs16BitsEqualTheBf16Reference) {
  // Under precision bf16 the weights are bf16 values and may be stored as their 16-bit halves;
  // activations are rounded by the caller. The chains are ref::matmul_bf16's.
  uint64_t seed = 9000;
  for (const Kernels* k : targets()) {
    for (int M : {1, 2, 3, 4, 7}) {
      for (int K : {1, 5, 64, 257}) {
        for (int N : {1, 8, 31, 32, 33, 100}) {
          auto a = test::random_floats(int64_t{M} * K, seed++);
          auto w = test::random_floats(int64_t{K} * N, seed++);
          std::vector<float> want(static_cast<size_t>(M) * N);
          ref::matmul_bf16(a.data(), w.data(), want.data(), M, K, N);
          for (float& v : a) v = ref::round_bf16(v);
          for (float& v : w) v = ref::round_bf16(v);
          const simd::PackedMatrix packed = simd::pack_matrix(*k, w.data(), K, N, N, /*bf16_storage=*/true);
          std::vector<float> got(want.size(), -1.0f);
          k->matmul(a.data(), K, M, packed, 0, packed.panels, got.data(), N);
          expect_same(got, want, std::string(k->name) + " bf16 matmul M=" + std::to_string(M) + " K=" +
                                     std::to_string(K) + " N=" + std::to_string(N));
        }
      }
    }
  }
}

TEST(Matmul, PanelRangesAndStridesComposeExactly) {
  // Computing panels in pieces, with padded row strides, gives the same bits as one call.
  for (const Kernels* k : targets()) {
    const int M = 11, K = 70, N = 101, lda = 73, ldc = 105;
    const auto a = test::random_floats(int64_t{M} * lda, 5);
    const auto w = test::random_floats(int64_t{K} * N, 6);
    std::vector<float> dense_a(static_cast<size_t>(M) * K);
    for (int m = 0; m < M; ++m)
      std::memcpy(&dense_a[static_cast<size_t>(m) * K], &a[static_cast<size_t>(m) * lda], K * sizeof(float));
    std::vector<float> want(static_cast<size_t>(M) * N);
    ref::matmul(dense_a.data(), w.data(), want.data(), M, K, N);
    const simd::PackedMatrix packed = simd::pack_matrix(*k, w.data(), K, N, N);
    std::vector<float> c(static_cast<size_t>(M) * ldc, 7.0f);
    for (int64_t p = 0; p < packed.panels; p += 2)
      k->matmul(a.data(), lda, M, packed, p, std::min<int64_t>(p + 2, packed.panels), c.data(), ldc);
    std::vector<float> got(static_cast<size_t>(M) * N);
    for (int m = 0; m < M; ++m) {
      std::memcpy(&got[static_cast<size_t>(m) * N], &c[static_cast<size_t>(m) * ldc], N * sizeof(float));
      for (int j = N; j < ldc; ++j) EXPECT_EQ(c[static_cast<size_t>(m) * ldc + j], 7.0f) << "wrote past N";
    }
    expect_same(got, want, std::string(k->name) + " matmul in panel pieces");
  }
}

TEST(Pack, RowsByTheirOwnersEqualPanels) {
  // Training packs dy row piece by row piece (pack_rows) where the matmul packs panel by panel.
  for (const Kernels* k : targets()) {
    for (int64_t K : {1, 5, 64, 97}) {
      for (int64_t N : {1, 7, 32, 33, 100, 256}) {
        const auto x = test::random_floats(K * N, static_cast<uint64_t>(K * 1000 + N));
        simd::PackedMatrix want = simd::allocate_packed(*k, K, N), got = simd::allocate_packed(*k, K, N);
        const simd::MatrixPart part{x.data(), N};
        simd::pack_panels(&part, 1, want, 0, want.panels, false);
        const int64_t cut = K / 3;
        simd::pack_rows(x.data(), N, cut, K, got.data.get(), K, k->panel_width);
        simd::pack_rows(x.data(), N, 0, cut, got.data.get(), K, k->panel_width);
        const size_t floats = static_cast<size_t>(want.panels * K * want.panel);
        EXPECT_EQ(std::memcmp(want.data.get(), got.data.get(), floats * sizeof(float)), 0)
            << k->name << " K=" << K << " N=" << N;
      }
    }
  }
}

TEST(Matmul, ManyRowsCrossRowBlocksExactly) {
  // Prefill and training shapes: M past the kernel's row blocks (96) and tiles, K past its depth.
  uint64_t seed = 7000;
  for (const Kernels* k : targets()) {
    for (int M : {95, 96, 97, 193, 290}) {
      for (int K : {17, 257, 520}) {
        for (int N : {9, 33, 64}) {
          check_matmul(*k, M, K, N, seed);
          seed += 2;
        }
      }
    }
  }
}

TEST(MatmulTransposed, EqualsReferenceOnTheExplicitTranspose) {
  // c = a^T @ b with a stored [K, M] (row stride lda >= M): ref::matmul on the transpose, bit for
  // bit, over M around the row tile, K around the packing depth, column offsets and panel pieces.
  uint64_t seed = 8000;
  for (const Kernels* k : targets()) {
    for (int M : {1, 2, 3, 4, 5, 8, 13, 31, 100}) {
      for (int K : {1, 7, 127, 128, 129, 300}) {
        for (int N : {1, 8, 33, 64}) {
          const int lda = M + 3;
          const auto a = test::random_floats(int64_t{K} * lda, seed++);
          const auto w = test::random_floats(int64_t{K} * N, seed++);
          std::vector<float> at(static_cast<size_t>(M) * K);
          for (int kk = 0; kk < K; ++kk)
            for (int m = 0; m < M; ++m) at[static_cast<size_t>(m) * K + kk] = a[static_cast<size_t>(kk) * lda + m];
          std::vector<float> want(static_cast<size_t>(M) * N);
          ref::matmul(at.data(), w.data(), want.data(), M, K, N);
          const simd::PackedMatrix packed = simd::pack_matrix(*k, w.data(), K, N, N);
          std::vector<float> scratch(static_cast<size_t>(k->matmul_at_scratch_floats(M)) + 1, 0.0f);
          std::vector<float> got(want.size(), -1.0f);
          // Rows in two pieces (the second starts at a column offset of a) and panels one at a time.
          const int m1 = M / 2;
          for (int64_t p = 0; p < packed.panels; ++p) {
            k->matmul_at(a.data(), lda, m1, packed, p, p + 1, got.data(), N, scratch.data());
            k->matmul_at(a.data() + m1, lda, M - m1, packed, p, p + 1, got.data() + static_cast<size_t>(m1) * N, N,
                         scratch.data());
          }
          expect_same(got, want, std::string(k->name) + " matmul_at M=" + std::to_string(M) + " K=" +
                                     std::to_string(K) + " N=" + std::to_string(N));
        }
      }
    }
  }
}

TEST(RmsNorm, EqualsReference) {
  uint64_t seed = 100;
  for (const Kernels* k : targets()) {
    for (int n : kSizes) {
      const auto x = test::random_floats(n, seed++, 3.0);
      const auto w = test::random_floats(n, seed++);
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      ref::rmsnorm(x.data(), w.data(), want.data(), n, 1e-5f);
      k->rmsnorm(x.data(), w.data(), got.data(), n, 1e-5f);
      expect_same(got, want, std::string(k->name) + " rmsnorm n=" + std::to_string(n));
    }
  }
}

TEST(Rope, EqualsReference) {
  const int head_dims[] = {2, 4, 6, 8, 10, 14, 16, 18, 24, 32, 34, 64, 130, 258};
  for (const Kernels* k : targets()) {
    for (int hd : head_dims) {
      for (int heads : {1, 3}) {
        const int length = 40;
        std::vector<float> cos_t(static_cast<size_t>(length * hd / 2)), sin_t(cos_t.size());
        ref::rope_tables(length, hd, 10000.0f, cos_t.data(), sin_t.data());
        for (int pos : {0, 1, 17, 39}) {
          auto want = test::random_floats(int64_t{heads} * hd, static_cast<uint64_t>(hd * 100 + pos));
          auto got = want;
          const float* c = cos_t.data() + pos * hd / 2;
          const float* s = sin_t.data() + pos * hd / 2;
          ref::rope(want.data(), heads, hd, c, s);
          k->rope(got.data(), heads, hd, c, s);
          expect_same(got, want, std::string(k->name) + " rope hd=" + std::to_string(hd) +
                                     " heads=" + std::to_string(heads) + " pos=" + std::to_string(pos));
        }
      }
    }
  }
}

TEST(Attention, EqualsReferenceWithBlockedKeys) {
  const int lengths[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100};
  const int head_dims[] = {2, 6, 8, 10, 16, 24, 32, 40, 64};
  uint64_t seed = 500;
  for (const Kernels* k : targets()) {
    for (int n : lengths) {
      for (int hd : head_dims) {
        const int stride = hd + 3;  // keys and values with a row stride, as in a [T, kv_dim] cache
        const auto q = test::random_floats(hd, seed++);
        const auto keys = test::random_floats(int64_t{n} * stride, seed++);
        const auto values = test::random_floats(int64_t{n} * stride, seed++);
        const float scale = ref::attention_scale<float>(hd);
        std::vector<float> want(static_cast<size_t>(hd)), got(static_cast<size_t>(hd));
        std::vector<float> scratch(static_cast<size_t>(n));
        ref::attention(q.data(), keys.data(), values.data(), stride, n, hd, scale, want.data(), scratch.data());
        // The head's keys alone in their blocks, and as the second head of three (blocks of
        // 3 hd dimensions); the last block's lanes past n hold keys that would score above every
        // real one (a partial last vector reads them), and must be dropped.
        std::vector<float> fill(static_cast<size_t>(hd));
        for (int d = 0; d < hd; ++d) fill[static_cast<size_t>(d)] = q[static_cast<size_t>(d)] > 0 ? 1e4f : -1e4f;
        // The values as rows (v_block_stride 16 rows), and in their blocks beside the keys'.
        for (const int heads : {1, 3}) {
          const int64_t dim = int64_t{heads} * hd, first = heads / 2 * hd, bs = simd::key_block_stride(dim);
          const auto kt = test::blocked_keys(keys.data(), stride, n, hd, dim, first, 1e4f, fill);
          const auto vb = test::blocked_values(values.data(), stride, n, hd, dim, heads / 2, 1e4f);
          k->attention(q.data(), kt.data() + first * simd::kKeysPerBlock, bs, values.data(), stride,
                       simd::kKeysPerBlock * stride, n, hd, scale, got.data(), scratch.data());
          expect_same(got, want, std::string(k->name) + " attention n=" + std::to_string(n) + " hd=" + std::to_string(hd) +
                                     " heads=" + std::to_string(heads));
          k->attention(q.data(), kt.data() + first * simd::kKeysPerBlock, bs, vb.data() + first * simd::kKeysPerBlock,
                       hd, bs, n, hd, scale, got.data(), scratch.data());
          expect_same(got, want, std::string(k->name) + " attention, values in blocks, n=" + std::to_string(n) +
                                     " hd=" + std::to_string(hd) + " heads=" + std::to_string(heads));
        }
      }
    }
  }
}

TEST(Attention, SeveralQueriesAtOnceEqualOneAtATime) {
  uint64_t seed = 700;
  for (const Kernels* k : targets()) {
    for (int nq : {1, 2, 3}) {
      for (int n0 : {1, 2, 7, 8, 9, 15, 16, 31, 32, 33, 40, 64, 97}) {
        for (int hd : {2, 6, 8, 16, 24, 32, 40, 64}) {
          const int64_t step = (nq == 3 && n0 % 2) ? 2 : 1;  // consecutive positions, or a wider gap
          int64_t n[3] = {n0, n0 + step, n0 + 2 * step};
          if (nq < 3 && n0 % 3 == 0) n[1] = n0;              // equal lengths (a group's heads)
          const int64_t n_max = n[nq - 1], ldv = hd + 5, q_stride = hd + 2, out_stride = hd + 1;
          // Keys in blocks of hd + 3 dimensions (random, past n too), the head's at dimension 3.
          const int64_t dim = hd + 3, bs = simd::key_block_stride(dim);
          const auto q = test::random_floats(nq * q_stride, seed++);
          const auto blocks = test::random_floats(simd::key_blocks(n_max) * bs, seed++);
          const float* kt = blocks.data() + 3 * simd::kKeysPerBlock;
          const auto v = test::random_floats(n_max * ldv, seed++);
          const float scale = ref::attention_scale<float>(hd);
          std::vector<float> want(static_cast<size_t>(nq * out_stride), 0.0f), got(want.size(), 0.0f);
          std::vector<float> scratch(static_cast<size_t>(nq * n_max));
          for (int i = 0; i < nq; ++i)
            k->attention(q.data() + i * q_stride, kt, bs, v.data(), ldv, simd::kKeysPerBlock * ldv, n[i], hd, scale,
                         want.data() + i * out_stride, scratch.data());
          k->attention_queries(q.data(), q_stride, n, nq, kt, bs, v.data(), ldv, simd::kKeysPerBlock * ldv, hd,
                               scale, got.data(), out_stride, scratch.data());
          expect_same(got, want, std::string(k->name) + " attention_queries nq=" + std::to_string(nq) +
                                     " n0=" + std::to_string(n0) + " hd=" + std::to_string(hd));
          // The values in blocks of one head (rows hd apart, blocks 16 hd apart).
          const auto vb = test::blocked_values(v.data(), ldv, n_max, hd, hd, 0, 0.0f);
          k->attention_queries(q.data(), q_stride, n, nq, kt, bs, vb.data(), hd, simd::key_block_stride(hd), hd,
                               scale, got.data(), out_stride, scratch.data());
          expect_same(got, want, std::string(k->name) + " attention_queries, values in blocks, nq=" +
                                     std::to_string(nq) + " n0=" + std::to_string(n0) + " hd=" + std::to_string(hd));
        }
      }
    }
  }
}

// Training's forward: every position of a sequence at once, for a key/value head and its group
// of query heads, with rows in strided layouts (around the query block of 3 vectors and the
// 128-key chunks).
TEST(Attention, WholeSequenceEqualsReferenceAtEveryPosition) {
  uint64_t seed = 900;
  for (const Kernels* k : targets()) {
    for (int T : {1, 2, 5, 8, 9, 23, 24, 25, 33, 49, 70, 130}) {
      for (int hd : {2, 6, 8, 16, 20, 32, 40, 64}) {
        for (int group : {1, 3}) {
          const int64_t q_stride = group * hd + (T % 2 ? 2 : 0), kv_stride = hd + (T % 2), out_stride = group * hd + 1;
          const auto q = test::random_floats(T * q_stride, seed++), keys = test::random_floats(T * kv_stride, seed++);
          const auto values = test::random_floats(T * kv_stride, seed++);
          const float scale = ref::attention_scale<float>(hd);
          std::vector<float> want(static_cast<size_t>(T * out_stride), 0.0f), got(want.size(), 0.0f);
          std::vector<float> scores(static_cast<size_t>(T));
          for (int t = 0; t < T; ++t)
            for (int h = 0; h < group; ++h)
              ref::attention(q.data() + t * q_stride + h * hd, keys.data(), values.data(), kv_stride, t + 1, hd, scale,
                             want.data() + t * out_stride + h * hd, scores.data());
          std::vector<float> scratch(static_cast<size_t>(k->attention_sequence_scratch(T, hd)));
          k->attention_sequence(q.data(), q_stride, keys.data(), values.data(), kv_stride, T, group, hd, scale,
                                got.data(), out_stride, scratch.data());
          expect_same(got, want, std::string(k->name) + " attention_sequence T=" + std::to_string(T) +
                                     " hd=" + std::to_string(hd) + " group=" + std::to_string(group));
        }
      }
    }
  }
}

// The training forward's attention over a sequence with infinities and NaNs the queries read (a
// key with +inf, a key of 1e30s, a value with +inf, a query with a NaN): every position against
// the reference.
TEST(Attention, WholeSequenceWithInfinitiesAndNaNsEqualsReference) {
  const float inf = std::numeric_limits<float>::infinity();
  uint64_t seed = 950;
  for (const Kernels* k : targets()) {
    for (int T : {9, 70}) {
      for (int hd : {16, 64}) {
        const int group = 1;
        const int64_t q_stride = hd, kv_stride = hd, out_stride = hd;
        auto q = test::random_floats(T * q_stride, seed++), keys = test::random_floats(T * kv_stride, seed++);
        auto values = test::random_floats(T * kv_stride, seed++);
        keys[static_cast<size_t>(2 * kv_stride)] = inf;
        for (int e = 0; e < hd; ++e) keys[static_cast<size_t>(4 * kv_stride + e)] = 1e30f;
        values[static_cast<size_t>(3 * kv_stride + 1)] = inf;
        q[static_cast<size_t>(6 * q_stride + 2)] = std::bit_cast<float>(0x7fc00001u);
        const float scale = ref::attention_scale<float>(hd);
        std::vector<float> want(static_cast<size_t>(T * out_stride), 0.0f), got(want.size(), 0.0f);
        std::vector<float> scores(static_cast<size_t>(T));
        for (int t = 0; t < T; ++t)
          ref::attention(q.data() + t * q_stride, keys.data(), values.data(), kv_stride, t + 1, hd, scale,
                         want.data() + t * out_stride, scores.data());
        std::vector<float> scratch(static_cast<size_t>(k->attention_sequence_scratch(T, hd)));
        k->attention_sequence(q.data(), q_stride, keys.data(), values.data(), kv_stride, T, group, hd, scale, got.data(),
                              out_stride, scratch.data());
        expect_same(got, want, std::string(k->name) + " attention_sequence with specials T=" + std::to_string(T) +
                                   " hd=" + std::to_string(hd));
      }
    }
  }
}

TEST(Elementwise, SwigluAddAndBf16EqualReference) {
  uint64_t seed = 900;
  for (const Kernels* k : targets()) {
    for (int n : kSizes) {
      auto g = test::random_floats(n, seed++, 6.0);
      const auto u = test::random_floats(n, seed++, 2.0);
      if (n > 3) {
        g[0] = 120.0f;  // exp(-g) underflows: silu(g) = g
        g[1] = -120.0f;  // exp(-g) overflows: silu(g) = -0
        g[2] = 0.0f;
      }
      std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
      ref::swiglu(g.data(), u.data(), want.data(), n);
      k->swiglu(g.data(), u.data(), got.data(), n);
      expect_same(got, want, std::string(k->name) + " swiglu n=" + std::to_string(n));

      auto x = g;
      want = g;
      for (int i = 0; i < n; ++i) want[static_cast<size_t>(i)] = want[static_cast<size_t>(i)] + u[static_cast<size_t>(i)];
      k->add(x.data(), u.data(), n);
      expect_same(x, want, std::string(k->name) + " add n=" + std::to_string(n));

      for (int i = 0; i < n; ++i) want[static_cast<size_t>(i)] = ref::round_bf16(g[static_cast<size_t>(i)]);
      k->round_bf16(g.data(), got.data(), n);
      expect_same(got, want, std::string(k->name) + " round_bf16 n=" + std::to_string(n));
    }
  }
}

TEST(Bf16, RoundsToNearestEvenAndKeepsSpecials) {
  auto bits = [](uint32_t u) { return std::bit_cast<float>(u); };
  auto r = [](float f) { return std::bit_cast<uint32_t>(ref::round_bf16(f)); };
  EXPECT_EQ(r(bits(0x3f808000u)), 0x3f800000u);  // tie, even stays
  EXPECT_EQ(r(bits(0x3f818000u)), 0x3f820000u);  // tie, odd rounds up
  EXPECT_EQ(r(bits(0x3f808001u)), 0x3f810000u);  // above the tie
  EXPECT_EQ(r(bits(0x7f7fffffu)), 0x7f800000u);  // the largest float rounds to inf
  EXPECT_EQ(r(bits(0xff800000u)), 0xff800000u);  // -inf stays
  EXPECT_EQ(r(bits(0x7f800001u)) & 0x7fc00000u, 0x7fc00000u);  // signalling NaN quieted
  EXPECT_EQ(r(bits(0x80000001u)), 0x80000000u);  // tiny subnormal to -0
}

TEST(CrossEntropy, EqualsReference) {
  const int vocabs[] = {1, 2, 7, 8, 9, 31, 255, 256, 257, 1000};
  uint64_t seed = 1300;
  for (const Kernels* k : targets()) {
    for (int v : vocabs) {
      const auto z = test::random_floats(v, seed++, 4.0);
      for (int target : {0, v / 2, v - 1}) {
        const float want = ref::cross_entropy(z.data(), v, target);
        const float got = k->cross_entropy(z.data(), v, target);
        EXPECT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << k->name << " cross_entropy vocab=" << v << " target=" << target;
      }
    }
  }
}

// Logits whose softmax exponentials see NaN differences, -inf and underflow: +inf (the maximum, so
// inf - inf), a NaN (skipped by the maximum, NaN into the sum), -inf, all -inf (maximum -inf: every
// difference NaN), and a spread of 1e30 (the rest underflow to 0), forward and backward.
TEST(CrossEntropy, InfinitiesAndNaNsEqualReference) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::bit_cast<float>(0x7fc00001u);
  uint64_t seed = 1400;
  for (const Kernels* k : targets()) {
    for (int v : {7, 33, 257}) {
      for (int pattern = 0; pattern < 5; ++pattern) {
        auto z = test::random_floats(v, seed++, 4.0);
        const size_t at = static_cast<size_t>(v / 3);
        if (pattern == 0) z[at] = inf;
        if (pattern == 1) z[at] = nan;
        if (pattern == 2) z[at] = -inf;
        if (pattern == 3) std::fill(z.begin(), z.end(), -inf);
        if (pattern == 4) z[at] = 1e30f;
        for (int target : {0, v - 1, static_cast<int>(at)}) {
          const std::string what = std::string(k->name) + " vocab=" + std::to_string(v) + " pattern " +
                                   std::to_string(pattern) + " target=" + std::to_string(target);
          const float want = ref::cross_entropy(z.data(), v, target);
          EXPECT_EQ(std::bit_cast<uint32_t>(k->cross_entropy(z.data(), v, target)), std::bit_cast<uint32_t>(want)) << what;
          std::vector<float> dz_want(static_cast<size_t>(v)), dz(dz_want.size());
          ref::cross_entropy_backward(z.data(), v, target, 3.0f, dz_want.data());
          const float loss = k->cross_entropy_backward(z.data(), v, target, 3.0f, dz.data());
          expect_same(dz, dz_want, what + " backward");
          EXPECT_EQ(std::bit_cast<uint32_t>(loss), std::bit_cast<uint32_t>(want)) << what << " backward's loss";
        }
      }
    }
  }
}

// exp and log over a sample of every float bit pattern (a stride through all 2^32) and the
// special values: each SIMD target computes the reference's bits, NaN payloads included.
TEST(ElementaryFunctions, SimdEqualsReferenceOnSampledBitPatterns) {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 997) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            88.7f, 88.8f, 89.0f, 89.5f, -87.3f, -103.9f, -104.0f, -104.1f,
                            std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max()};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  std::vector<float> want(x.size()), got(x.size());
  for (const Kernels* k : targets()) {
    for (size_t i = 0; i < x.size(); ++i) want[i] = ref::exp_f32(x[i]);
    k->exp(x.data(), got.data(), static_cast<int64_t>(x.size()));
    expect_same(got, want, std::string(k->name) + " exp");
    for (size_t i = 0; i < x.size(); ++i) want[i] = ref::log_f32(x[i]);
    k->log(x.data(), got.data(), static_cast<int64_t>(x.size()));
    expect_same(got, want, std::string(k->name) + " log");
  }
}

// The softmaxes' exp of a value less its set's maximum (x <= 0 or a quiet NaN): the same bits as
// exp where a target has its own form (x86's drops the upper clamp and the NaN blend, and on
// AVX-512 rounds n in one step), for every float from -0 down to -104 (the clamp; 1.1 billion), every
// quiet NaN and +0, and every 101st float below -104 (which both clamp to -104, and whose results
// underflow through the slow subnormal path); a stride through all of them against the reference
// too, on every target. Sanitizer builds take every 101st input only (they check memory).
TEST(ElementaryFunctions, ExpOfNonPositiveEqualsExpOnEveryInput) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  constexpr uint64_t kWholeStride = 101;
#else
  constexpr uint64_t kWholeStride = 1;
#endif
  // The ranges of bit patterns and their strides: -0 to -104, below -104 to -inf, the quiet NaNs
  // with the sign set, +0, the quiet NaNs with the sign clear (signalling NaNs left out).
  struct Range {
    uint64_t first, last, stride;
  };
  const Range ranges[] = {{0x80000000u, 0xc2d00000u, 1},
                          {0xc2d00001u, 0xff800000u, 101},
                          {0xffc00000u, 0xffffffffu, 1},
                          {0u, 0u, 1},
                          {0x7fc00000u, 0x7fffffffu, 1}};
  const auto check = [&](const Kernels& k, uint64_t every, bool with_reference) {
    constexpr uint64_t kChunk = uint64_t{1} << 20;
    std::vector<float> x(kChunk), want(kChunk), got(kChunk);
    int64_t compared = 0;
    for (const Range& r : ranges)
      for (uint64_t stride = r.stride * every, u0 = r.first; u0 <= r.last; u0 += kChunk * stride) {
        const int64_t n = static_cast<int64_t>(std::min(kChunk, (r.last - u0) / stride + 1));
        for (int64_t i = 0; i < n; ++i) x[static_cast<size_t>(i)] = std::bit_cast<float>(static_cast<uint32_t>(u0 + static_cast<uint64_t>(i) * stride));
        k.exp(x.data(), want.data(), n);
        k.exp_of_non_positive(x.data(), got.data(), n);
        const auto tail = [n](std::vector<float> v) { v.resize(static_cast<size_t>(n)); return v; };
        if (std::memcmp(got.data(), want.data(), static_cast<size_t>(n) * sizeof(float)) != 0)
          expect_same(tail(got), tail(want), std::string(k.name) + " exp_of_non_positive against exp from " + std::to_string(u0));
        if (with_reference) {
          for (int64_t i = 0; i < n; ++i) want[static_cast<size_t>(i)] = ref::exp_f32(x[static_cast<size_t>(i)]);
          expect_same(tail(got), tail(want), std::string(k.name) + " exp_of_non_positive against the reference");
        }
        compared += n;
      }
    return compared;
  };
  for (const Kernels* k : targets()) {
    ASSERT_NE(k->exp_of_non_positive, nullptr) << k->name;
    check(*k, 9973, true);
    if (k->exp_of_non_positive != k->exp) {
      const int64_t n = check(*k, kWholeStride, false);
      std::printf("%s: exp_of_non_positive equals exp on %lld inputs\n", k->name, static_cast<long long>(n));
    }
  }
}

// The SIMD exp computes lanes past its bounds at the bound (kernels/simd/math-inl.hpp), which
// gives the reference's values past them only because its own steps at the bounds round to +0
// and overflow to +inf.
TEST(ElementaryFunctions, ExpAtItsBoundsIsZeroAndInfinity) {
  EXPECT_EQ(std::bit_cast<uint32_t>(ref::exp_f32(ref::kExpLower)), 0u);
  EXPECT_EQ(ref::exp_f32(ref::kExpUpper), std::numeric_limits<float>::infinity());
}

// Every float whose exp is subnormal, rounds to zero or overflows (x in [-104.5, -87] and
// [88, 89.5]): where exp's last step, p * 2^n, rounds (AVX-512 computes it with vscalefps,
// the reference as two products: docs/ARITHMETIC.md).
TEST(ElementaryFunctions, SimdExpEqualsReferenceWhereItsLastStepRounds) {
  std::vector<float> x;
  const auto every = [&x](float from, float to) {  // from < to, same sign
    const uint32_t a = std::bit_cast<uint32_t>(from), b = std::bit_cast<uint32_t>(to);
    for (uint32_t u = std::min(a, b); u <= std::max(a, b); ++u) x.push_back(std::bit_cast<float>(u));
  };
  every(-104.5f, -87.0f);
  every(88.0f, 89.5f);
  std::vector<float> want(x.size()), got(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = ref::exp_f32(x[i]);
  for (const Kernels* k : targets()) {
    k->exp(x.data(), got.data(), static_cast<int64_t>(x.size()));
    expect_same(got, want, std::string(k->name) + " exp");
  }
}

}  // namespace
}  // namespace lockstep
