// One query row of causal attention for one head (ref::attention). Lanes run along independent
// outputs only: along keys j for the scores (keys stored transposed so key j's d-th value sits
// beside key j+1's), along d for the weighted sum of values. Every score's dot product, the
// softmax denominator and every output's sum over j stay single chains in increasing order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <limits>

#include "kernels/ref/math.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/math-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

using DF = hn::ScalableTag<float>;

// scores[j0 .. j0 + U N) = (q . k_j) * scale, U vectors of keys at once for independent chains.
template <int U>
HWY_INLINE hn::Vec<DF> Scores(const float* HWY_RESTRICT q, const float* HWY_RESTRICT kt, int64_t ldk,
                              int64_t j0, int32_t head_dim, hn::Vec<DF> scale, float* scores,
                              hn::Vec<DF> m) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> acc[U];
  for (int u = 0; u < U; ++u) acc[u] = hn::Zero(d);
  for (int32_t dd = 0; dd < head_dim; ++dd) {
    const auto qd = hn::Set(d, q[dd]);
    const float* row = kt + static_cast<int64_t>(dd) * ldk + j0;
    for (int u = 0; u < U; ++u) acc[u] = hn::MulAdd(qd, hn::LoadU(d, row + u * N), acc[u]);
  }
  for (int u = 0; u < U; ++u) {
    const auto s = hn::Mul(acc[u], scale);
    hn::StoreU(s, d, scores + j0 + u * N);
    m = MaxSkipNaN(m, s);
  }
  return m;
}

// out[d0 .. d0 + U N) = sum_j e_j v_j[d] as U vectors of independent chains over j.
template <int U>
HWY_INLINE void WeightedSum(const float* HWY_RESTRICT e, const float* HWY_RESTRICT v, int64_t ldv,
                            int64_t n, int32_t d0, hn::Vec<DF> l, float* HWY_RESTRICT out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<DF> acc[U];
  for (int u = 0; u < U; ++u) acc[u] = hn::Zero(d);
  for (int64_t j = 0; j < n; ++j) {
    const auto ej = hn::Set(d, e[j]);
    const float* row = v + j * ldv + d0;
    for (int u = 0; u < U; ++u) acc[u] = hn::MulAdd(ej, hn::LoadU(d, row + u * N), acc[u]);
  }
  for (int u = 0; u < U; ++u) hn::StoreU(hn::Div(acc[u], l), d, out + d0 + u * N);
}

void Attention(const float* HWY_RESTRICT q, const float* HWY_RESTRICT kt, int64_t ldk,
               const float* HWY_RESTRICT v, int64_t ldv, int64_t n, int32_t head_dim, float scale,
               float* HWY_RESTRICT out, float* HWY_RESTRICT scores) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto scale_v = hn::Set(d, scale);
  auto mv = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 4 * N <= n; j += 4 * N) mv = Scores<4>(q, kt, ldk, j, head_dim, scale_v, scores, mv);
  for (; j + N <= n; j += N) mv = Scores<1>(q, kt, ldk, j, head_dim, scale_v, scores, mv);
  float m = -std::numeric_limits<float>::infinity();
  for (; j < n; ++j) {
    float dot = 0.0f;
    for (int32_t dd = 0; dd < head_dim; ++dd) dot = ref::fma_f32(q[dd], kt[static_cast<int64_t>(dd) * ldk + j], dot);
    scores[j] = dot * scale;
    m = ref::max_skip_nan(m, scores[j]);
  }
  m = ReduceMaxSkipNaN(d, mv, m);

  // e_j = exp(s_j - m) in place; l = sum of e_j in increasing j.
  const auto m_v = hn::Set(d, m);
  j = 0;
  for (; j + N <= n; j += N) hn::StoreU(Exp(d, hn::Sub(hn::LoadU(d, scores + j), m_v)), d, scores + j);
  for (; j < n; ++j) scores[j] = ref::exp_f32(scores[j] - m);
  float l = 0.0f;
  for (j = 0; j < n; ++j) l = l + scores[j];

  const auto l_v = hn::Set(d, l);
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N)) WeightedSum<4>(scores, v, ldv, n, d0, l_v, out);
  for (; d0 + N <= head_dim; d0 += static_cast<int32_t>(N)) WeightedSum<1>(scores, v, ldv, n, d0, l_v, out);
  for (; d0 < head_dim; ++d0) {
    float acc = 0.0f;
    for (j = 0; j < n; ++j) acc = ref::fma_f32(scores[j], v[j * ldv + d0], acc);
    out[d0] = acc / l;
  }
}

void FillAttention(Kernels& k) { k.attention = &Attention; }

#else

// The portable fallback: ref::attention's loops over the transposed key layout.
void Attention(const float* q, const float* kt, int64_t ldk, const float* v, int64_t ldv, int64_t n,
               int32_t head_dim, float scale, float* out, float* scores) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    float dot = 0.0f;
    for (int32_t dd = 0; dd < head_dim; ++dd) dot = ref::fma_f32(q[dd], kt[static_cast<int64_t>(dd) * ldk + j], dot);
    scores[j] = dot * scale;
    m = ref::max_skip_nan(m, scores[j]);
  }
  for (int32_t dd = 0; dd < head_dim; ++dd) out[dd] = 0.0f;
  float l = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = ref::exp_f32(scores[j] - m);
    l = l + e;
    for (int32_t dd = 0; dd < head_dim; ++dd) out[dd] = ref::fma_f32(e, v[j * ldv + dd], out[dd]);
  }
  for (int32_t dd = 0; dd < head_dim; ++dd) out[dd] = out[dd] / l;
}

void FillAttention(Kernels& k) { k.attention = &Attention; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
