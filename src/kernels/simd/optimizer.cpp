// The optimizer's passes over every parameter: AdamW, the EMA, and the block sums of the
// gradient's squared norm. AdamW and the EMA are element-wise, so lanes compute exactly what
// ref's scalar loops compute (the same operations in the same order, no fma). The block sums are
// reductions: each block stays one f64 chain in increasing index, and only independent blocks
// run side by side.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/optimizer.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "kernels/ref/optimizer.hpp"
#include "kernels/simd/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Sums of squares of blocks [b_begin, b_end) of g [n] (ref::kNormBlock elements each, the last
// possibly shorter) into sums[b - b_begin]. Four whole blocks at a time, four chains interleaved
// so that one chain's add latency overlaps the others'; each chain is still its block's sum in
// increasing index from +0.
void BlockSumsOfSquares(const float* g, int64_t n, int64_t b_begin, int64_t b_end, double* sums) {
  constexpr int64_t B = ref::kNormBlock;
  const int64_t whole = n / B;  // blocks with B elements
  int64_t b = b_begin;
  for (; b + 4 <= std::min(b_end, whole); b += 4) {
    const float *g0 = g + b * B, *g1 = g0 + B, *g2 = g1 + B, *g3 = g2 + B;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    for (int64_t i = 0; i < B; ++i) {
      s0 = s0 + static_cast<double>(g0[i]) * static_cast<double>(g0[i]);
      s1 = s1 + static_cast<double>(g1[i]) * static_cast<double>(g1[i]);
      s2 = s2 + static_cast<double>(g2[i]) * static_cast<double>(g2[i]);
      s3 = s3 + static_cast<double>(g3[i]) * static_cast<double>(g3[i]);
    }
    sums[b - b_begin] = s0;
    sums[b + 1 - b_begin] = s1;
    sums[b + 2 - b_begin] = s2;
    sums[b + 3 - b_begin] = s3;
  }
  for (; b < b_end; ++b) {
    const int64_t end = std::min(n, (b + 1) * B);
    double s = 0.0;
    for (int64_t i = b * B; i < end; ++i) s = s + static_cast<double>(g[i]) * static_cast<double>(g[i]);
    sums[b - b_begin] = s;
  }
}

#if HWY_NATIVE_FMA

using DF = hn::ScalableTag<float>;

void AdamWUpdate(const ref::AdamWScalars& s, float grad_scale, const float* HWY_RESTRICT grad,
                 const float* HWY_RESTRICT p, const float* HWY_RESTRICT m, const float* HWY_RESTRICT v,
                 float* HWY_RESTRICT p_out, float* HWY_RESTRICT m_out, float* HWY_RESTRICT v_out, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const bool scaled = grad_scale != 1.0f;
  const auto scale = hn::Set(d, grad_scale), beta1 = hn::Set(d, s.beta1), beta2 = hn::Set(d, s.beta2);
  const auto c1 = hn::Set(d, s.c1), c2 = hn::Set(d, s.c2), inv = hn::Set(d, s.inv_sqrt_bc2);
  const auto eps = hn::Set(d, s.eps), decay = hn::Set(d, s.decay), step = hn::Set(d, s.step_size);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    auto g = hn::LoadU(d, grad + i);
    if (scaled) g = hn::Mul(g, scale);
    const auto mi = hn::Add(hn::Mul(beta1, hn::LoadU(d, m + i)), hn::Mul(c1, g));
    const auto vi = hn::Add(hn::Mul(beta2, hn::LoadU(d, v + i)), hn::Mul(c2, hn::Mul(g, g)));
    const auto denom = hn::Add(hn::Mul(hn::Sqrt(vi), inv), eps);
    hn::StoreU(hn::Sub(hn::Mul(hn::LoadU(d, p + i), decay), hn::Mul(step, hn::Div(mi, denom))), d, p_out + i);
    hn::StoreU(mi, d, m_out + i);
    hn::StoreU(vi, d, v_out + i);
  }
  if (i < n) ref::adamw_update(s, grad_scale, grad + i, p + i, m + i, v + i, p_out + i, m_out + i, v_out + i, n - i);
}

void EmaUpdate(double decay, const float* HWY_RESTRICT ema, const float* HWY_RESTRICT p, float* HWY_RESTRICT ema_out,
               int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto keep = hn::Set(d, static_cast<float>(decay)), take = hn::Set(d, static_cast<float>(1.0 - decay));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Add(hn::Mul(keep, hn::LoadU(d, ema + i)), hn::Mul(take, hn::LoadU(d, p + i))), d, ema_out + i);
  if (i < n) ref::ema_update(decay, ema + i, p + i, ema_out + i, n - i);
}

void FillOptimizer(Kernels& k) {
  k.adamw_update = &AdamWUpdate;
  k.ema_update = &EmaUpdate;
  k.block_sums_of_squares = &BlockSumsOfSquares;
}

#else

void FillOptimizer(Kernels& k) {
  k.adamw_update = &ref::adamw_update;
  k.ema_update = &ref::ema_update;
  k.block_sums_of_squares = &BlockSumsOfSquares;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
