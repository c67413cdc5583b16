// The weighted sums of rows both attention files run: attention's sum of values over the keys,
// e_j v_j, and the backward's dq, ds_j k_j. Included once per Highway target (the include guard
// toggles with HWY_TARGET_TOGGLE), only where HWY_NATIVE_FMA holds.
#if defined(LOCKSTEP_SIMD_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOCKSTEP_SIMD_ATTENTION_INL_H_
#undef LOCKSTEP_SIMD_ATTENTION_INL_H_
#else
#define LOCKSTEP_SIMD_ATTENTION_INL_H_
#endif

#include <hwy/highway.h>

#include <utility>

#include "kernels/ref/math.hpp"
#include "kernels/simd/tile-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

// out_i[d0 .. d0 + U N) for QB queries i: the chain over keys j in [j_begin, j_end), in
// increasing j, of fma(w[i * w_query + j * w_key], rows_j[d], acc), from +0 when `first`, else
// continuing from out (an exact round trip). The queries share the rows' loads.
template <int QB, int U>
HWY_INLINE void WeightedRowsTile(const float* HWY_RESTRICT w, int64_t w_query, int64_t w_key,
                                 const float* HWY_RESTRICT rows, int64_t row_stride, int64_t j_begin, int64_t j_end,
                                 int32_t d0, bool first, float* HWY_RESTRICT out, int64_t out_stride) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto at = [&](size_t I) LOCKSTEP_LAMBDA_INLINE { return static_cast<int64_t>(I / U) * out_stride + d0 + static_cast<int64_t>(I % U) * N; };
  // Accumulator I: query I / U, vector I % U (tile-inl.hpp).
  WithTile<QB * U>([&](auto I) LOCKSTEP_LAMBDA_INLINE { return first ? hn::Zero(d) : hn::LoadU(d, out + at(decltype(I)::value)); },
                   [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
                     for (int64_t j = j_begin; j < j_end; ++j) {
                       // Each row vector and each weight is loaded once (the repeats fold away).
                       const auto fma = [&](hn::Vec<decltype(d)>& a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
                         const auto wj = hn::Set(d, w[static_cast<int64_t>(I_ / U) * w_query + j * w_key]);
                         const auto rv = hn::LoadU(d, rows + j * row_stride + d0 + static_cast<int64_t>(I_ % U) * N);
                         a_iu = hn::MulAdd(wj, rv, a_iu);
                       };
                       (fma(acc, I), ...);
                     }
                     (hn::StoreU(acc, d, out + at(I)), ...);
                   });
}

// WeightedRowsTile over every d in [0, head_dim): tiles of four vectors, then two, then single vectors,
// then scalar chains.
template <int QB>
HWY_INLINE void WeightedRows(const float* w, int64_t w_query, int64_t w_key, const float* rows, int64_t row_stride,
                             int64_t j_begin, int64_t j_end, int32_t head_dim, bool first, float* out,
                             int64_t out_stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N))
    WeightedRowsTile<QB, 4>(w, w_query, w_key, rows, row_stride, j_begin, j_end, d0, first, out, out_stride);
  for (; d0 + 2 * N <= head_dim; d0 += static_cast<int32_t>(2 * N))
    WeightedRowsTile<QB, 2>(w, w_query, w_key, rows, row_stride, j_begin, j_end, d0, first, out, out_stride);
  for (; d0 + N <= head_dim; d0 += static_cast<int32_t>(N))
    WeightedRowsTile<QB, 1>(w, w_query, w_key, rows, row_stride, j_begin, j_end, d0, first, out, out_stride);
  for (; d0 < head_dim; ++d0)
    for (int i = 0; i < QB; ++i) {
      float acc = first ? 0.0f : out[i * out_stride + d0];
      for (int64_t j = j_begin; j < j_end; ++j)
        acc = ref::fma_f32(w[i * w_query + j * w_key], rows[j * row_stride + d0], acc);
      out[i * out_stride + d0] = acc;
    }
}

#endif  // HWY_NATIVE_FMA

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
