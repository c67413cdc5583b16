// The weighted sums of rows both attention files run (attention's sum of values over the keys,
// e_j v_j, and the backward's dq, ds_j k_j) and the x86 square transposes both use. Included
// once per Highway target (the include guard toggles with HWY_TARGET_TOGGLE), only where
// HWY_NATIVE_FMA holds.

// Whether the target being compiled has TransposeSquare (x86 AVX-512 and AVX2). A macro
// expression, evaluated against HWY_TARGET wherever it is used.
#ifndef LOCKSTEP_HAS_SQUARE_TRANSPOSE
#define LOCKSTEP_HAS_SQUARE_TRANSPOSE (HWY_TARGET <= HWY_AVX3 || HWY_TARGET == HWY_AVX2)
#endif

#if defined(LOCKSTEP_SIMD_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOCKSTEP_SIMD_ATTENTION_INL_H_
#undef LOCKSTEP_SIMD_ATTENTION_INL_H_
#else
#define LOCKSTEP_SIMD_ATTENTION_INL_H_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <utility>

#include "kernels/ref/math.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/tile-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

#if LOCKSTEP_HAS_SQUARE_TRANSPOSE
// An N x N block of floats transposed, N the lanes of a full vector (16 on AVX-512, 8 on AVX2):
// lane i of column c[j] is lane j of row r[i]. Raw x86 registers (64 shuffles on AVX-512, 24
// on AVX2): pairs of rows interleaved, then quads (u[4g + k], 128-bit block b: rows 4g..4g+3 of
// column 4b + k), then the 128-bit blocks exchanged.
#if HWY_TARGET <= HWY_AVX3
HWY_INLINE void TransposeSquare(const __m512 (&r)[16], __m512 (&c)[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm512_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm512_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD);
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88),
                 v3 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
    c[k] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    c[4 + k] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    c[8 + k] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    c[12 + k] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}
#else
HWY_INLINE void TransposeSquare(const __m256 (&r)[8], __m256 (&c)[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int g = 0; g < 8; g += 4) {
    u[g] = _mm256_shuffle_ps(t[g], t[g + 2], 0x44);
    u[g + 1] = _mm256_shuffle_ps(t[g], t[g + 2], 0xEE);
    u[g + 2] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0x44);
    u[g + 3] = _mm256_shuffle_ps(t[g + 1], t[g + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    c[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    c[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}
#endif
#endif

// out_i[d0 .. d0 + U N) for QB queries i: the chain over keys j in [j_begin, j_end), in
// increasing j, of fma(w[i * w_query + j * w_key], row_j[d], acc), from +0 when `first`, else
// continuing from out (an exact round trip). Row j at rows + value_row(j, row_stride,
// block_stride) (kernels.hpp: runs of kKeysPerBlock rows row_stride apart, the runs block_stride
// apart; plain rows have block_stride = 16 row_stride). The queries share the rows' loads.
template <int QB, int U>
HWY_INLINE void WeightedRowsTile(const float* HWY_RESTRICT w, int64_t w_query, int64_t w_key,
                                 const float* HWY_RESTRICT rows, int64_t row_stride, int64_t block_stride,
                                 int64_t j_begin, int64_t j_end, int32_t d0, bool first, float* HWY_RESTRICT out,
                                 int64_t out_stride) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto at = [&](size_t I) LOCKSTEP_LAMBDA_INLINE { return static_cast<int64_t>(I / U) * out_stride + d0 + static_cast<int64_t>(I % U) * N; };
  // Accumulator I: query I / U, vector I % U (tile-inl.hpp).
  WithTile<QB * U>([&](auto I) LOCKSTEP_LAMBDA_INLINE { return first ? hn::Zero(d) : hn::LoadU(d, out + at(decltype(I)::value)); },
                   [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
                     for (int64_t j = j_begin; j < j_end;) {  // run by run of rows
                       const int64_t run_end = std::min(j_end, (j / kKeysPerBlock + 1) * kKeysPerBlock);
                       const float* row = rows + value_row(j, row_stride, block_stride) + d0;
                       for (; j < run_end; ++j, row += row_stride) {
                         // Each row vector and each weight is loaded once (the repeats fold away).
                         const auto fma = [&](hn::Vec<decltype(d)>& a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
                           const auto wj = hn::Set(d, w[static_cast<int64_t>(I_ / U) * w_query + j * w_key]);
                           const auto rv = hn::LoadU(d, row + static_cast<int64_t>(I_ % U) * N);
                           a_iu = hn::MulAdd(wj, rv, a_iu);
                         };
                         (fma(acc, I), ...);
                       }
                     }
                     (hn::StoreU(acc, d, out + at(I)), ...);
                   });
}

// WeightedRowsTile over every d in [0, head_dim): tiles of four vectors, then two, then single vectors,
// then scalar chains.
template <int QB>
HWY_INLINE void WeightedRows(const float* w, int64_t w_query, int64_t w_key, const float* rows, int64_t row_stride,
                             int64_t block_stride, int64_t j_begin, int64_t j_end, int32_t head_dim, bool first,
                             float* out, int64_t out_stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N))
    WeightedRowsTile<QB, 4>(w, w_query, w_key, rows, row_stride, block_stride, j_begin, j_end, d0, first, out,
                            out_stride);
  for (; d0 + 2 * N <= head_dim; d0 += static_cast<int32_t>(2 * N))
    WeightedRowsTile<QB, 2>(w, w_query, w_key, rows, row_stride, block_stride, j_begin, j_end, d0, first, out,
                            out_stride);
  for (; d0 + N <= head_dim; d0 += static_cast<int32_t>(N))
    WeightedRowsTile<QB, 1>(w, w_query, w_key, rows, row_stride, block_stride, j_begin, j_end, d0, first, out,
                            out_stride);
  for (; d0 < head_dim; ++d0)
    for (int i = 0; i < QB; ++i) {
      float acc = first ? 0.0f : out[i * out_stride + d0];
      for (int64_t j = j_begin; j < j_end; ++j)
        acc = ref::fma_f32(w[i * w_query + j * w_key], rows[value_row(j, row_stride, block_stride) + d0], acc);
      out[i * out_stride + d0] = acc;
    }
}

#endif  // HWY_NATIVE_FMA

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
