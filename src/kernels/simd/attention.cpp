// One query row of causal attention for one head (ref::attention). Lanes run along independent
// outputs only: along keys j for the scores (keys stored transposed so key j's d-th value sits
// beside key j+1's), along d for the weighted sum of values. Every score's dot product, the
// softmax denominator and every output's sum over j stay single chains in increasing order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <limits>
#include <utility>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/attention-inl.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/math-inl.hpp"
#include "kernels/simd/tile-inl.hpp"

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
  WithTile<U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int32_t dd = 0; dd < head_dim; ++dd) {
      const auto qd = hn::Set(d, q[dd]);
      const float* row = kt + static_cast<int64_t>(dd) * ldk + j0;
      ((acc = hn::MulAdd(qd, hn::LoadU(d, row + static_cast<int64_t>(I) * N), acc)), ...);
    }
    // The running maximum takes the vectors in increasing u, as before.
    const auto finish = [&](hn::Vec<DF> a_u, int64_t u) LOCKSTEP_LAMBDA_INLINE {
      const auto s = hn::Mul(a_u, scale);
      hn::StoreU(s, d, scores + j0 + u * N);
      m = MaxSkipNaN(m, s);
    };
    (finish(acc, static_cast<int64_t>(I)), ...);
  });
  return m;
}

// out[d0 .. d0 + U N) = sum_j e_j v_j[d] as U vectors of independent chains over j.
template <int U>
HWY_INLINE void WeightedSum(const float* HWY_RESTRICT e, const float* HWY_RESTRICT v, int64_t ldv,
                            int64_t n, int32_t d0, hn::Vec<DF> l, float* HWY_RESTRICT out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  WithTile<U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int64_t j = 0; j < n; ++j) {
      const auto ej = hn::Set(d, e[j]);
      const float* row = v + j * ldv + d0;
      ((acc = hn::MulAdd(ej, hn::LoadU(d, row + static_cast<int64_t>(I) * N), acc)), ...);
    }
    (hn::StoreU(hn::Div(acc, l), d, out + d0 + static_cast<int64_t>(I) * N), ...);
  });
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

// Vectors per score tile for QB <= 3 queries: QB * 4 accumulators, at most 12 of the 16 AVX2
// registers.
constexpr int kTileVectors = 4;

// Scores of QB queries at once over U vectors of keys: acc[i][u] lanes j0 + u N + lane, each a
// chain over d of q_i[d] * kt[d, j] as Scores computes it; the keys' loads are shared.
template <int QB, int U>
HWY_INLINE void ScoresMulti(const float* HWY_RESTRICT q, int64_t q_stride, const float* HWY_RESTRICT kt,
                            int64_t ldk, int64_t j0, int32_t head_dim, hn::Vec<DF> scale, float* scores,
                            int64_t ld_scores) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // Accumulator I: query I / U, vector of keys I % U (tile-inl.hpp).
  WithTile<QB * U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int32_t dd = 0; dd < head_dim; ++dd) {
      const float* row = kt + static_cast<int64_t>(dd) * ldk + j0;
      // Each key vector and each query's value is loaded once (the repeats fold away).
      const auto fma = [&](hn::Vec<DF>& a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
        const auto qd = hn::Set(d, q[static_cast<int64_t>(I_ / U) * q_stride + dd]);
        a_iu = hn::MulAdd(qd, hn::LoadU(d, row + static_cast<int64_t>(I_ % U) * N), a_iu);
      };
      (fma(acc, I), ...);
    }
    (hn::StoreU(hn::Mul(acc, scale), d,
                scores + static_cast<int64_t>(I / U) * ld_scores + j0 + static_cast<int64_t>(I % U) * N),
     ...);
  });
}

// scores_i[j] (row i at scores + i * ld_scores) = (q_i . k_j) * scale for j < n[i], QB queries
// with n ascending, each dot the chain ScoresMulti computes: tiles of kTileVectors vectors of
// keys, then single vectors, then the last partial vector whole through a buffer when kt's rows (ldk
// floats) hold it (a scalar tail otherwise). Scores of keys at or past a query's own n, up to
// n[QB - 1], may be written; the caller ignores them.
template <int QB>
HWY_INLINE void AllScores(const float* HWY_RESTRICT q, int64_t q_stride, const int64_t* n,
                          const float* HWY_RESTRICT kt, int64_t ldk, int32_t head_dim, hn::Vec<DF> scale,
                          float* scores, int64_t ld_scores) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n_max = n[QB - 1];
  int64_t j = 0;
  constexpr int U = kTileVectors;
  for (; j + U * N <= n_max; j += U * N) ScoresMulti<QB, U>(q, q_stride, kt, ldk, j, head_dim, scale, scores, ld_scores);
  for (; j + N <= n_max; j += N) ScoresMulti<QB, 1>(q, q_stride, kt, ldk, j, head_dim, scale, scores, ld_scores);
  if (j < n_max && j + N <= ldk) {
    HWY_ALIGN float tail[QB * (HWY_MAX_BYTES / sizeof(float))];
    ScoresMulti<QB, 1>(q, q_stride, kt + j, ldk, 0, head_dim, scale, tail, N);
    for (int i = 0; i < QB; ++i)
      for (int64_t jj = j; jj < n[i]; ++jj) scores[i * ld_scores + jj] = tail[i * N + jj - j];
    return;
  }
  const float scale_s = hn::GetLane(scale);
  for (int i = 0; i < QB; ++i) {
    const float* qi = q + i * q_stride;
    for (int64_t jj = j; jj < n[i]; ++jj) {
      float dot = 0.0f;
      for (int32_t dd = 0; dd < head_dim; ++dd) dot = ref::fma_f32(qi[dd], kt[static_cast<int64_t>(dd) * ldk + jj], dot);
      scores[i * ld_scores + jj] = dot * scale_s;
    }
  }
}

// The QB queries' scalar chains, interleaved so that their latencies overlap (each is alone
// latency-bound: one add or fma per 3-4 cycles). n ascending. out_i = chain in increasing j from
// +0 of acc = step(acc, i, j) over j < n_i.
template <int QB, class Step>
HWY_INLINE void Chains(const int64_t* n, float* out, const Step& step) {
  float acc[QB];
  for (int i = 0; i < QB; ++i) acc[i] = 0.0f;
  for (int64_t j = 0; j < n[0]; ++j)
    for (int i = 0; i < QB; ++i) acc[i] = step(acc[i], i, j);
  for (int i = 1; i < QB; ++i)
    for (int64_t j = n[0]; j < n[i]; ++j) acc[i] = step(acc[i], i, j);
  for (int i = 0; i < QB; ++i) out[i] = acc[i];
}

// Attention for QB queries of one key/value head, query i reading keys [0, n[i]) with
// n[0] <= n[1] <= ... (consecutive positions of one row, or the heads of one group at one
// position). Every value is the single-query kernel's: scores, max, exponentials and l per
// query, then the weighted sums over the keys all queries read, shared, and each query's own
// remaining keys after them in the same order. scratch: QB * n[QB - 1] floats.
template <int QB>
void AttentionMulti(const float* HWY_RESTRICT q, int64_t q_stride, const int64_t* n, const float* HWY_RESTRICT kt,
                    int64_t ldk, const float* HWY_RESTRICT v, int64_t ldv, int32_t head_dim, float scale,
                    float* HWY_RESTRICT out, int64_t out_stride, float* HWY_RESTRICT scratch) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n_max = n[QB - 1], n_min = n[0];
  const int64_t ld = n_max;  // scratch row stride
  const auto scale_v = hn::Set(d, scale);
  AllScores<QB>(q, q_stride, n, kt, ldk, head_dim, scale_v, scratch, ld);
  float l[QB];
  for (int i = 0; i < QB; ++i) {
    float* s = scratch + i * ld;
    // max over [0, n_i), then e = exp(s - m) and l = chain of e.
    auto mv = hn::Set(d, -std::numeric_limits<float>::infinity());
    int64_t jj = 0;
    for (; jj + N <= n[i]; jj += N) mv = MaxSkipNaN(mv, hn::LoadU(d, s + jj));
    float m = -std::numeric_limits<float>::infinity();
    for (; jj < n[i]; ++jj) m = ref::max_skip_nan(m, s[jj]);
    m = ReduceMaxSkipNaN(d, mv, m);
    const auto m_v = hn::Set(d, m);
    for (jj = 0; jj + N <= n[i]; jj += N) hn::StoreU(Exp(d, hn::Sub(hn::LoadU(d, s + jj), m_v)), d, s + jj);
    for (; jj < n[i]; ++jj) s[jj] = ref::exp_f32(s[jj] - m);
  }
  Chains<QB>(n, l, [&](float acc, int i, int64_t j) { return acc + scratch[i * ld + j]; });
  // Weighted sums: keys [0, n_min) for all queries at once, then each query's own tail.
  WeightedRows<QB>(scratch, ld, 1, v, ldv, 0, n_min, head_dim, true, out, out_stride);
  for (int i = 1; i < QB; ++i)
    if (n[i] > n_min) WeightedRows<1>(scratch + i * ld, ld, 1, v, ldv, n_min, n[i], head_dim, false, out + i * out_stride, out_stride);
  for (int i = 0; i < QB; ++i) {
    float* o = out + i * out_stride;
    const auto l_v = hn::Set(d, l[i]);
    int32_t dd = 0;
    for (; dd + N <= head_dim; dd += static_cast<int32_t>(N)) hn::StoreU(hn::Div(hn::LoadU(d, o + dd), l_v), d, o + dd);
    for (; dd < head_dim; ++dd) o[dd] = o[dd] / l[i];
  }
}

void AttentionQueries(const float* q, int64_t q_stride, const int64_t* n, int nq, const float* kt, int64_t ldk,
                      const float* v, int64_t ldv, int32_t head_dim, float scale, float* out, int64_t out_stride,
                      float* scratch) {
  switch (nq) {
    case 3: return AttentionMulti<3>(q, q_stride, n, kt, ldk, v, ldv, head_dim, scale, out, out_stride, scratch);
    case 2: return AttentionMulti<2>(q, q_stride, n, kt, ldk, v, ldv, head_dim, scale, out, out_stride, scratch);
    default:
      for (int i = 0; i < nq; ++i)
        Attention(q + i * q_stride, kt, ldk, v, ldv, n[i], head_dim, scale, out + i * out_stride, scratch);
  }
}

void FillAttention(Kernels& k) {
  k.attention = &Attention;
  k.attention_queries = &AttentionQueries;
}

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

void AttentionQueries(const float* q, int64_t q_stride, const int64_t* n, int nq, const float* kt, int64_t ldk,
                      const float* v, int64_t ldv, int32_t head_dim, float scale, float* out, int64_t out_stride,
                      float* scratch) {
  for (int i = 0; i < nq; ++i)
    Attention(q + i * q_stride, kt, ldk, v, ldv, n[i], head_dim, scale, out + i * out_stride, scratch);
}

void FillAttention(Kernels& k) {
  k.attention = &Attention;
  k.attention_queries = &AttentionQueries;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
