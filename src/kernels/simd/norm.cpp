// RMSNorm: the sum of squares is one scalar fma chain, as ref::rmsnorm (a reduction is never
// split across lanes); the scaling is independent per element and runs in vectors.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

void RmsNorm(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, float* HWY_RESTRICT y,
             int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss = ref::fma_f32(x[i], x[i], ss);
  const float mean = ss / static_cast<float>(n);
  const float r = 1.0f / std::sqrt(mean + eps);
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto rv = hn::Set(d, r);
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), rv), hn::LoadU(d, w + i)), d, y + i);
  for (; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

float InverseRms(const float* HWY_RESTRICT x, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss = ref::fma_f32(x[i], x[i], ss);
  const float mean = ss / static_cast<float>(n);
  return 1.0f / std::sqrt(mean + eps);
}

// dx = r * (g - xhat * c), g = dy * w, xhat = x * r, c = (fma chain of g * xhat) / n.
void RmsNormBackwardRow(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, const float* HWY_RESTRICT dy,
                        float* HWY_RESTRICT dx, int64_t n, float eps) {
  const float r = InverseRms(x, n, eps);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s = ref::fma_f32(dy[i] * w[i], x[i] * r, s);
  const float c = s / static_cast<float>(n);
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto rv = hn::Set(d, r), cv = hn::Set(d, c);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::Mul(hn::LoadU(d, dy + i), hn::LoadU(d, w + i));
    const auto xhat = hn::Mul(hn::LoadU(d, x + i), rv);
    hn::StoreU(hn::Mul(rv, hn::Sub(g, hn::Mul(xhat, cv))), d, dx + i);
  }
  for (; i < n; ++i) dx[i] = r * (dy[i] * w[i] - (x[i] * r) * c);
}

// dw[i] for i in [i0, i1): chains over rows, four vectors of columns at a time.
void RmsNormBackwardWeight(const float* HWY_RESTRICT x, const float* HWY_RESTRICT inv_rms,
                           const float* HWY_RESTRICT dy, float* HWY_RESTRICT dw, int64_t R, int64_t n,
                           int64_t i0, int64_t i1) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = i0;
  for (; i + 4 * N <= i1; i += 4 * N) {
    hn::Vec<decltype(d)> acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
    for (int64_t r = 0; r < R; ++r) {
      const auto rv = hn::Set(d, inv_rms[r]);
      for (int u = 0; u < 4; ++u) {
        const auto xhat = hn::Mul(hn::LoadU(d, x + r * n + i + u * N), rv);
        acc[u] = hn::MulAdd(hn::LoadU(d, dy + r * n + i + u * N), xhat, acc[u]);
      }
    }
    for (int u = 0; u < 4; ++u) hn::StoreU(acc[u], d, dw + i + u * N);
  }
  for (; i + N <= i1; i += N) {
    auto acc = hn::Zero(d);
    for (int64_t r = 0; r < R; ++r)
      acc = hn::MulAdd(hn::LoadU(d, dy + r * n + i), hn::Mul(hn::LoadU(d, x + r * n + i), hn::Set(d, inv_rms[r])), acc);
    hn::StoreU(acc, d, dw + i);
  }
  for (; i < i1; ++i) {
    float acc = 0.0f;
    for (int64_t r = 0; r < R; ++r) acc = ref::fma_f32(dy[r * n + i], x[r * n + i] * inv_rms[r], acc);
    dw[i] = acc;
  }
}

void FillNorm(Kernels& k) {
  k.rmsnorm = &RmsNorm;
  k.inverse_rms = &InverseRms;
  k.rmsnorm_backward_row = &RmsNormBackwardRow;
  k.rmsnorm_backward_weight = &RmsNormBackwardWeight;
}

#else

float InverseRms(const float* x, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss = ref::fma_f32(x[i], x[i], ss);
  const float mean = ss / static_cast<float>(n);
  return 1.0f / std::sqrt(mean + eps);
}

void RmsNormBackwardRow(const float* x, const float* w, const float* dy, float* dx, int64_t n, float eps) {
  const float r = InverseRms(x, n, eps);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s = ref::fma_f32(dy[i] * w[i], x[i] * r, s);
  const float c = s / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) dx[i] = r * (dy[i] * w[i] - (x[i] * r) * c);
}

void RmsNormBackwardWeight(const float* x, const float* inv_rms, const float* dy, float* dw, int64_t R, int64_t n,
                           int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) {
    float acc = 0.0f;
    for (int64_t r = 0; r < R; ++r) acc = ref::fma_f32(dy[r * n + i], x[r * n + i] * inv_rms[r], acc);
    dw[i] = acc;
  }
}

void FillNorm(Kernels& k) {
  k.rmsnorm = &ref::rmsnorm<float>;
  k.inverse_rms = &InverseRms;
  k.rmsnorm_backward_row = &RmsNormBackwardRow;
  k.rmsnorm_backward_weight = &RmsNormBackwardWeight;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
