// The integer matmul of the profile lockstep-int8dot-1 (ref::matmul_blocks_quantized's twin):
// y [M, N] from activations quantized per block of 32 (qx, dx: ref::quantize_activations) and a
// BlockMatrix. A group's kBlockGroup outputs sit in the lanes of one f32 accumulator vector; for
// each block b in increasing order the kernel forms every output's integer block sum (exact:
// any lane split and any order of integer adds give the same int32), converts it (exact), and
// runs acc = fma(float(isum), dw * dx, acc): one chain per output in block order, as the
// reference. Rows go in tiles of up to kBlockRows sharing each group's weight loads (prefill);
// one row (decoding) is a tile of one. Threads split the groups.
//
// Highway 1.0.3 has no int8 dot product, so x86 uses AVX2 intrinsics inside Highway's per-target
// code (AVX2 and AVX-512 targets; AVX-512 VNNI is not used yet); every other target (NEON, SVE,
// the portable baseline) runs the scalar loops, which compute the same integers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/matmul_blocks.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "kernels/ref/blocks.hpp"
#include "kernels/ref/math.hpp"
#include "kernels/simd/block_matrix.hpp"
#include "kernels/simd/kernels.hpp"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {

using quant::kBlockValues;

// The 32 integers of block (g, b, j), widened from nibbles where the matrix keeps them.
inline void BlockInts(const BlockMatrix& w, int64_t g, int64_t b, int j, int8_t out[kBlockValues]) {
  const uint8_t* p = w.block(g, b, j);
  if (!w.nibbles) {
    std::memcpy(out, p, kBlockValues);
    return;
  }
  for (int e = 0; e < 16; ++e) {
    out[e] = static_cast<int8_t>((p[e] & 15) - 8);
    out[e + 16] = static_cast<int8_t>((p[e] >> 4) - 8);
  }
}

// Outputs of groups [g_begin, g_end) one at a time: the portable kernel, and the others' scalar
// twin in spirit (the same chain, the same integers).
void MatmulBlocksScalar(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin,
                        int64_t g_end, float* y, int64_t ldy) {
  const int64_t B = w.blocks, K = w.K;
  int8_t ints[kBlockValues];
  for (int64_t g = g_begin; g < g_end; ++g) {
    const int cols = static_cast<int>(std::min<int64_t>(kBlockGroup, w.N - g * kBlockGroup));
    for (int64_t m = 0; m < M; ++m) {
      for (int j = 0; j < cols; ++j) {
        float acc = 0.0f;
        for (int64_t b = 0; b < B; ++b) {
          BlockInts(w, g, b, j, ints);
          const int32_t isum = ref::block_dot(ints, qx + m * K + b * kBlockValues);
          const float s = w.group_scales(g, b)[j] * dx[m * B + b];
          acc = ref::fma_f32(static_cast<float>(isum), s, acc);
        }
        y[m * ldy + g * kBlockGroup + j] = acc;
      }
    }
  }
}

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

constexpr int kBlockRows = 4;  // rows sharing a group's weight loads

// Block (g, b, j)'s 32 integers in a vector: int8 as stored, or nibbles split (low nibbles are
// elements 0..15, high ones 16..31) and offset by -8.
HWY_INLINE __m256i LoadInts(const BlockMatrix& w, int64_t g, int64_t b, int j) {
  const uint8_t* p = w.block(g, b, j);
  if (!w.nibbles) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low = _mm_set1_epi8(15);
  const __m256i both = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), low), _mm_and_si128(v, low));
  return _mm256_sub_epi8(both, _mm256_set1_epi8(8));
}

// Eight int32 partial sums of one block's 32 products w[e] * x[e]. maddubs multiplies an unsigned
// byte by a signed one and adds pairs with int16 saturation: it gets |w| (128 for -128, exact as
// unsigned) and x with w's sign (|x| <= 127, so negating never overflows), whose pair sums stay
// within 2 * 128 * 127 = 32512. So nothing saturates and each product is w * x.
HWY_INLINE __m256i BlockDot(__m256i wv, __m256i xv) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// Lane j of the result: the sum of s_j's eight lanes (integers: exact in any order).
HWY_INLINE __m256i SumLanes(__m256i s0, __m256i s1, __m256i s2, __m256i s3, __m256i s4, __m256i s5, __m256i s6,
                            __m256i s7) {
  const __m256i u0 = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
  const __m256i u1 = _mm256_hadd_epi32(_mm256_hadd_epi32(s4, s5), _mm256_hadd_epi32(s6, s7));
  // u0 = [S0..S3 of lanes 0-3 | S0..S3 of lanes 4-7], u1 likewise for S4..S7.
  return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20), _mm256_permute2x128_si256(u0, u1, 0x31));
}

// Rows [m0, m0 + R) of group g: each block's eight weight vectors are loaded once for the R rows.
template <int R>
HWY_INLINE void GroupRows(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w, int64_t g, float* y,
                          int64_t ldy) {
  const int64_t B = w.blocks, K = w.K;
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < B; ++b) {
    const __m256i w0 = LoadInts(w, g, b, 0), w1 = LoadInts(w, g, b, 1), w2 = LoadInts(w, g, b, 2),
                  w3 = LoadInts(w, g, b, 3), w4 = LoadInts(w, g, b, 4), w5 = LoadInts(w, g, b, 5),
                  w6 = LoadInts(w, g, b, 6), w7 = LoadInts(w, g, b, 7);
    const __m256 dw = _mm256_loadu_ps(w.group_scales(g, b));
    for (int r = 0; r < R; ++r) {
      const int64_t m = m0 + r;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + m * K + b * kBlockValues));
      const __m256i isum = SumLanes(BlockDot(w0, xv), BlockDot(w1, xv), BlockDot(w2, xv), BlockDot(w3, xv),
                                    BlockDot(w4, xv), BlockDot(w5, xv), BlockDot(w6, xv), BlockDot(w7, xv));
      const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(dx[m * B + b]));  // dw * dx, one rounding
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), s, acc[r]);     // exact conversion, then the fma
    }
  }
  const int64_t col0 = g * kBlockGroup;
  const int64_t cols = std::min<int64_t>(kBlockGroup, w.N - col0);
  for (int r = 0; r < R; ++r) {
    float* out = y + (m0 + r) * ldy + col0;
    if (cols == kBlockGroup) {
      _mm256_storeu_ps(out, acc[r]);
    } else {
      alignas(32) float lanes[kBlockGroup];
      _mm256_store_ps(lanes, acc[r]);
      std::memcpy(out, lanes, static_cast<size_t>(cols) * sizeof(float));
    }
  }
}

void MatmulBlocks(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                  float* y, int64_t ldy) {
  for (int64_t g = g_begin; g < g_end; ++g) {
    int64_t m = 0;
    for (; m + kBlockRows <= M; m += kBlockRows) GroupRows<kBlockRows>(qx, dx, m, w, g, y, ldy);
    switch (M - m) {
      case 3: GroupRows<3>(qx, dx, m, w, g, y, ldy); break;
      case 2: GroupRows<2>(qx, dx, m, w, g, y, ldy); break;
      case 1: GroupRows<1>(qx, dx, m, w, g, y, ldy); break;
      default: break;
    }
  }
}

#else  // no integer dot product written for this target yet: the scalar loops

void MatmulBlocks(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                  float* y, int64_t ldy) {
  MatmulBlocksScalar(qx, dx, M, w, g_begin, g_end, y, ldy);
}

#endif

void FillMatmulBlocks(Kernels& k) {
  k.matmul_blocks = &MatmulBlocks;
  k.matmul_blocks_scalar = &MatmulBlocksScalar;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
