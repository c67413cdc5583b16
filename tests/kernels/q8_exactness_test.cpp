// The matmul over q8 weights kept packed (int8 panels and per-column scales, PackedMatrix::q8)
// and over q4 weights (4-bit panels, a scale per 32 rows per column, PackedMatrix::q4) against
// ref::matmul over the expanded f32 weights float(q) * scale, with memcmp, for every SIMD
// target this machine runs: decode (1 row, the wide tiles), 2 rows (the tiles over int8), and
// prefill (3 rows up: the panels widened once per block), K across the depth blocks.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

using test::expect_same;

struct Q8 {
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::vector<float> expanded;
};

// A random [K, N] packed as q8 (with an all-zero column when N > 2, so a zero scale is covered).
Q8 random_q8(int K, int N, uint64_t seed) {
  auto w = test::random_floats(int64_t{K} * N, seed);
  if (N > 2)
    for (int k = 0; k < K; ++k) w[static_cast<size_t>(k) * N + 1] = 0.0f;
  Q8 out;
  out.q.resize(w.size());
  out.scale.resize(static_cast<size_t>(N));
  out.expanded.resize(w.size());
  quant::pack_q8(w.data(), K, N, out.q.data(), out.scale.data());
  quant::expand_q8(out.q.data(), out.scale.data(), K, N, out.expanded.data());
  return out;
}

TEST(MatmulQ8, PackedInt8EqualsReferenceOnExpandedWeights) {
  uint64_t seed = 31000;
  for (const Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;  // LOCKSTEP_TEST_TARGETS (test_util.hpp)
    for (int M : {1, 2, 3, 4, 5, 8, 9, 13}) {
      for (int K : {1, 7, 64, 255, 257, 300}) {
        for (int N : {1, 3, 8, 17, 32, 33, 48, 100, 130}) {
          const Q8 w = random_q8(K, N, seed++);
          const auto a = test::random_floats(int64_t{M} * K, seed++);
          std::vector<float> want(static_cast<size_t>(M) * N);
          ref::matmul(a.data(), w.expanded.data(), want.data(), M, K, N);
          const simd::Q8Part part{w.q.data(), w.scale.data(), N};
          const simd::PackedMatrix packed = simd::pack_q8_concat(*k, &part, 1, K);
          ASSERT_TRUE(packed.q8);
          std::vector<float> got(want.size(), -1.0f);
          k->matmul(a.data(), K, M, packed, 0, packed.panels, got.data(), N);
          expect_same(got, want, std::string(k->name) + " q8 matmul M=" + std::to_string(M) + " K=" +
                                     std::to_string(K) + " N=" + std::to_string(N));
        }
      }
    }
  }
}

TEST(MatmulQ8, ConcatenatedPartsPanelPiecesAndStridesEqualReference) {
  // [w0 | w1] packed together, computed a few panels at a time with padded strides, equals the
  // reference over each expanded part.
  for (const Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;  // LOCKSTEP_TEST_TARGETS (test_util.hpp)
    for (int M : {1, 2, 11}) {
      const int K = 270, N0 = 37, N1 = 70, lda = K + 3, ldc = N0 + N1 + 5;
      const Q8 w0 = random_q8(K, N0, 41), w1 = random_q8(K, N1, 42);
      const auto a = test::random_floats(int64_t{M} * lda, 43);
      std::vector<float> dense_a(static_cast<size_t>(M) * K);
      for (int m = 0; m < M; ++m)
        std::memcpy(&dense_a[static_cast<size_t>(m) * K], &a[static_cast<size_t>(m) * lda], K * sizeof(float));
      std::vector<float> want0(static_cast<size_t>(M) * N0), want1(static_cast<size_t>(M) * N1);
      ref::matmul(dense_a.data(), w0.expanded.data(), want0.data(), M, K, N0);
      ref::matmul(dense_a.data(), w1.expanded.data(), want1.data(), M, K, N1);
      const simd::Q8Part parts[] = {{w0.q.data(), w0.scale.data(), N0}, {w1.q.data(), w1.scale.data(), N1}};
      const simd::PackedMatrix packed = simd::pack_q8_concat(*k, parts, 2, K);
      std::vector<float> c(static_cast<size_t>(M) * ldc, 7.0f);
      for (int64_t p = 0; p < packed.panels; p += 2)
        k->matmul(a.data(), lda, M, packed, p, std::min<int64_t>(p + 2, packed.panels), c.data(), ldc);
      std::vector<float> got0(want0.size()), got1(want1.size());
      for (int m = 0; m < M; ++m) {
        const float* row = &c[static_cast<size_t>(m) * ldc];
        std::memcpy(&got0[static_cast<size_t>(m) * N0], row, N0 * sizeof(float));
        std::memcpy(&got1[static_cast<size_t>(m) * N1], row + N0, N1 * sizeof(float));
        for (int j = N0 + N1; j < ldc; ++j) EXPECT_EQ(row[j], 7.0f) << "wrote past N";
      }
      const std::string what = std::string(k->name) + " q8 concat M=" + std::to_string(M);
      expect_same(got0, want0, what + " part 0");
      expect_same(got1, want1, what + " part 1");
    }
  }
}

// A random [K, N] packed as q4 (an all-zero column when N > 2), and its expansion.
struct Q4 {
  std::vector<uint8_t> packed;
  std::vector<float> scale;
  std::vector<float> expanded;
};
Q4 random_q4(int K, int N, uint64_t seed) {
  auto w = test::random_floats(int64_t{K} * N, seed);
  if (N > 2)
    for (int k = 0; k < K; ++k) w[static_cast<size_t>(k) * N + 1] = 0.0f;
  Q4 out;
  out.packed.resize(static_cast<size_t>(K * quant::q4_row_bytes(N)));
  out.scale.resize(static_cast<size_t>(quant::q4_groups(K) * N));
  out.expanded.resize(w.size());
  quant::pack_q4(w.data(), K, N, out.packed.data(), out.scale.data());
  quant::expand_q4(out.packed.data(), out.scale.data(), K, N, out.expanded.data());
  return out;
}

TEST(MatmulQ4, Packed4BitEqualsReferenceOnExpandedWeights) {
  uint64_t seed = 52000;
  for (const Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;  // LOCKSTEP_TEST_TARGETS (test_util.hpp)
    for (int M : {1, 2, 3, 4, 9, 13}) {
      for (int K : {1, 2, 7, 31, 32, 33, 64, 255, 257, 300}) {
        for (int N : {1, 3, 8, 17, 33, 48, 100}) {
          const Q4 w = random_q4(K, N, seed++);
          const auto a = test::random_floats(int64_t{M} * K, seed++);
          std::vector<float> want(static_cast<size_t>(M) * N);
          ref::matmul(a.data(), w.expanded.data(), want.data(), M, K, N);
          const simd::Q4Part part{w.packed.data(), w.scale.data(), N};
          const simd::PackedMatrix packed = simd::pack_q4_concat(*k, &part, 1, K);
          ASSERT_TRUE(packed.q4);
          std::vector<float> got(want.size(), -1.0f);
          k->matmul(a.data(), K, M, packed, 0, packed.panels, got.data(), N);
          const std::string what = std::string(k->name) + " q4 matmul M=" + std::to_string(M) + " K=" +
                                   std::to_string(K) + " N=" + std::to_string(N);
          expect_same(got, want, what);
          for (int kk = 0; kk < K; kk += 5)  // the layout's weight() is the expansion
            for (int n = 0; n < N; ++n)
              ASSERT_EQ(std::bit_cast<uint32_t>(packed.weight(kk, n)),
                        std::bit_cast<uint32_t>(w.expanded[static_cast<size_t>(kk) * N + n])) << what;
        }
      }
    }
  }
}

TEST(MatmulQ4, DecodingStraightFromThePackedBytesEqualsReference) {
  // One row over many full panels (the wide decode tiles on every target), then the rest.
  uint64_t seed = 58000;
  for (const Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;  // LOCKSTEP_TEST_TARGETS (test_util.hpp)
    for (int K : {1, 2, 33, 257, 300}) {
      for (int N : {256, 300, 520}) {
        const Q4 w = random_q4(K, N, seed++);
        const auto a = test::random_floats(K, seed++);
        std::vector<float> want(static_cast<size_t>(N));
        ref::matmul(a.data(), w.expanded.data(), want.data(), 1, K, N);
        const simd::Q4Part part{w.packed.data(), w.scale.data(), N};
        const simd::PackedMatrix packed = simd::pack_q4_concat(*k, &part, 1, K);
        std::vector<float> got(want.size(), -1.0f);
        k->matmul(a.data(), K, 1, packed, 0, packed.panels, got.data(), N);
        expect_same(got, want, std::string(k->name) + " q4 decode K=" + std::to_string(K) + " N=" + std::to_string(N));
        std::vector<float> pieces(want.size(), -1.0f);  // started mid-way, in odd pieces
        for (int64_t p = 0; p < packed.panels; p += 3)
          k->matmul(a.data(), K, 1, packed, p, std::min<int64_t>(p + 3, packed.panels), pieces.data(), N);
        expect_same(pieces, want, std::string(k->name) + " q4 decode in pieces K=" + std::to_string(K));
      }
    }
  }
}

TEST(MatmulQ4, ConcatenatedPartsAndPanelPiecesEqualReference) {
  for (const Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;  // LOCKSTEP_TEST_TARGETS (test_util.hpp)
    for (int M : {1, 5}) {
      const int K = 97, N0 = 19, N1 = 40, ldc = N0 + N1 + 3;
      const Q4 w0 = random_q4(K, N0, 61), w1 = random_q4(K, N1, 62);
      const auto a = test::random_floats(int64_t{M} * K, 63);
      std::vector<float> want0(static_cast<size_t>(M) * N0), want1(static_cast<size_t>(M) * N1);
      ref::matmul(a.data(), w0.expanded.data(), want0.data(), M, K, N0);
      ref::matmul(a.data(), w1.expanded.data(), want1.data(), M, K, N1);
      const simd::Q4Part parts[] = {{w0.packed.data(), w0.scale.data(), N0}, {w1.packed.data(), w1.scale.data(), N1}};
      const simd::PackedMatrix packed = simd::pack_q4_concat(*k, parts, 2, K);
      std::vector<float> c(static_cast<size_t>(M) * ldc, 7.0f);
      for (int64_t p = 0; p < packed.panels; ++p) k->matmul(a.data(), K, M, packed, p, p + 1, c.data(), ldc);
      std::vector<float> got0(want0.size()), got1(want1.size());
      for (int m = 0; m < M; ++m) {
        const float* row = &c[static_cast<size_t>(m) * ldc];
        std::memcpy(&got0[static_cast<size_t>(m) * N0], row, N0 * sizeof(float));
        std::memcpy(&got1[static_cast<size_t>(m) * N1], row + N0, N1 * sizeof(float));
        for (int j = N0 + N1; j < ldc; ++j) EXPECT_EQ(row[j], 7.0f) << "wrote past N";
      }
      expect_same(got0, want0, std::string(k->name) + " q4 concat part 0");
      expect_same(got1, want1, std::string(k->name) + " q4 concat part 1");
    }
  }
}

TEST(MatmulQ8, HoldsAQuarterOfTheBytes) {
  const Kernels& k = simd::best_kernels();
  const Q8 w = random_q8(256, 512, 7);
  const simd::Q8Part part{w.q.data(), w.scale.data(), 512};
  const simd::PackedMatrix q8 = simd::pack_q8_concat(k, &part, 1, 256);
  const simd::PackedMatrix f32 = simd::pack_matrix(k, w.expanded.data(), 256, 512, 512);
  EXPECT_EQ(q8.bytes(), 256u * 512u + 512u * 4u);
  EXPECT_EQ(f32.bytes(), 256u * 512u * 4u);
}

}  // namespace
}  // namespace lockstep
