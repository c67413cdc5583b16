// RMSNorm: the sum of squares is one scalar fma chain, as ref::rmsnorm (a reduction is never
// split across lanes); the scaling is independent per element and runs in vectors.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/norm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>
#include <type_traits>
#include <utility>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/tile-inl.hpp"

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

// Row-wise chains of kRows rows run interleaved: each alone is bound by the fma latency, one
// element per 4 cycles. f(r0, group) handles rows [r0, r0 + group::value).
constexpr int64_t kRows = 4;

template <class F>
HWY_INLINE void ForRowGroups(int64_t rows, const F& f) {
  int64_t r0 = 0;
  for (; r0 + kRows <= rows; r0 += kRows) f(r0, std::integral_constant<int64_t, kRows>());
  for (; r0 < rows; ++r0) f(r0, std::integral_constant<int64_t, 1>());
}

// Rows [0, rows) of x [rows, n]: r = 1 / sqrt(chain of x^2 / n + eps) per row, y = (x r) w, and
// r into inv_rms when given.
void RmsNormRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, float* HWY_RESTRICT y,
                 float* HWY_RESTRICT inv_rms, int64_t rows, int64_t n, float eps) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  ForRowGroups(rows, [&](int64_t r0, auto group) {
    constexpr int64_t U = decltype(group)::value;
    float ss[U];
    for (int64_t u = 0; u < U; ++u) ss[u] = 0.0f;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t u = 0; u < U; ++u) ss[u] = ref::fma_f32(x[(r0 + u) * n + i], x[(r0 + u) * n + i], ss[u]);
    for (int64_t u = 0; u < U; ++u) {
      const float r = 1.0f / std::sqrt(ss[u] / static_cast<float>(n) + eps);
      const float* xr = x + (r0 + u) * n;
      float* yr = y + (r0 + u) * n;
      if (inv_rms) inv_rms[r0 + u] = r;
      const auto rv = hn::Set(d, r);
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, xr + i), rv), hn::LoadU(d, w + i)), d, yr + i);
      for (; i < n; ++i) yr[i] = (xr[i] * r) * w[i];
    }
  });
}

// dx = r * (g - xhat * c), g = dy * w, xhat = x * r, c = (fma chain of g * xhat) / n, per row
// with the forward's r.
void RmsNormBackwardRows(const float* HWY_RESTRICT x, const float* HWY_RESTRICT w, const float* HWY_RESTRICT dy,
                         const float* HWY_RESTRICT inv_rms, float* HWY_RESTRICT dx, int64_t rows, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  ForRowGroups(rows, [&](int64_t r0, auto group) {
    constexpr int64_t U = decltype(group)::value;
    float s[U];
    for (int64_t u = 0; u < U; ++u) s[u] = 0.0f;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t u = 0; u < U; ++u)
        s[u] = ref::fma_f32(dy[(r0 + u) * n + i] * w[i], x[(r0 + u) * n + i] * inv_rms[r0 + u], s[u]);
    for (int64_t u = 0; u < U; ++u) {
      const int64_t o = (r0 + u) * n;
      const float r = inv_rms[r0 + u], c = s[u] / static_cast<float>(n);
      const auto rv = hn::Set(d, r), cv = hn::Set(d, c);
      int64_t i = 0;
      for (; i + N <= n; i += N) {
        const auto g = hn::Mul(hn::LoadU(d, dy + o + i), hn::LoadU(d, w + i));
        const auto xhat = hn::Mul(hn::LoadU(d, x + o + i), rv);
        hn::StoreU(hn::Mul(rv, hn::Sub(g, hn::Mul(xhat, cv))), d, dx + o + i);
      }
      for (; i < n; ++i) dx[o + i] = r * (dy[o + i] * w[i] - (x[o + i] * r) * c);
    }
  });
}

// dw[i] for i in [i0, i1): chains over rows, four vectors of columns at a time.
// With `accumulate` (rmsnorm_backward_weight_continue), each chain starts from dw's value.
void RmsNormBackwardWeightChains(const float* HWY_RESTRICT x, const float* HWY_RESTRICT inv_rms,
                                 const float* HWY_RESTRICT dy, float* HWY_RESTRICT dw, int64_t R, int64_t n,
                                 int64_t i0, int64_t i1, bool accumulate) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = i0;
  for (; i + 4 * N <= i1; i += 4 * N) {
    WithTile<4>(
        [&](auto U) LOCKSTEP_LAMBDA_INLINE {
          return accumulate ? hn::LoadU(d, dw + i + static_cast<int64_t>(decltype(U)::value) * N) : hn::Zero(d);
        },
        [&]<size_t... U>(std::index_sequence<U...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
      for (int64_t r = 0; r < R; ++r) {
        const auto rv = hn::Set(d, inv_rms[r]);
        const auto fma = [&](hn::Vec<decltype(d)>& a_u, int64_t u) LOCKSTEP_LAMBDA_INLINE {
          const auto xhat = hn::Mul(hn::LoadU(d, x + r * n + i + u * N), rv);
          a_u = hn::MulAdd(hn::LoadU(d, dy + r * n + i + u * N), xhat, a_u);
        };
        (fma(acc, static_cast<int64_t>(U)), ...);
      }
      (hn::StoreU(acc, d, dw + i + static_cast<int64_t>(U) * N), ...);
    });
  }
  for (; i + N <= i1; i += N) {
    auto acc = accumulate ? hn::LoadU(d, dw + i) : hn::Zero(d);
    for (int64_t r = 0; r < R; ++r)
      acc = hn::MulAdd(hn::LoadU(d, dy + r * n + i), hn::Mul(hn::LoadU(d, x + r * n + i), hn::Set(d, inv_rms[r])), acc);
    hn::StoreU(acc, d, dw + i);
  }
  for (; i < i1; ++i) {
    float acc = accumulate ? dw[i] : 0.0f;
    for (int64_t r = 0; r < R; ++r) acc = ref::fma_f32(dy[r * n + i], x[r * n + i] * inv_rms[r], acc);
    dw[i] = acc;
  }
}

void RmsNormBackwardWeight(const float* x, const float* inv_rms, const float* dy, float* dw, int64_t R, int64_t n,
                           int64_t i0, int64_t i1) {
  RmsNormBackwardWeightChains(x, inv_rms, dy, dw, R, n, i0, i1, false);
}

void RmsNormBackwardWeightContinue(const float* x, const float* inv_rms, const float* dy, float* dw, int64_t R,
                                   int64_t n, int64_t i0, int64_t i1) {
  RmsNormBackwardWeightChains(x, inv_rms, dy, dw, R, n, i0, i1, true);
}

void FillNorm(Kernels& k) {
  k.rmsnorm = &RmsNorm;
  k.rmsnorm_rows = &RmsNormRows;
  k.rmsnorm_backward_rows = &RmsNormBackwardRows;
  k.rmsnorm_backward_weight = &RmsNormBackwardWeight;
  k.rmsnorm_backward_weight_continue = &RmsNormBackwardWeightContinue;
}

#else

void RmsNormRows(const float* x, const float* w, float* y, float* inv_rms, int64_t rows, int64_t n, float eps) {
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x + row * n;
    float ss = 0.0f;
    for (int64_t i = 0; i < n; ++i) ss = ref::fma_f32(xr[i], xr[i], ss);
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    if (inv_rms) inv_rms[row] = r;
    for (int64_t i = 0; i < n; ++i) y[row * n + i] = (xr[i] * r) * w[i];
  }
}

void RmsNormBackwardRows(const float* x, const float* w, const float* dy, const float* inv_rms, float* dx, int64_t rows,
                         int64_t n) {
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t o = row * n;
    const float r = inv_rms[row];
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s = ref::fma_f32(dy[o + i] * w[i], x[o + i] * r, s);
    const float c = s / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) dx[o + i] = r * (dy[o + i] * w[i] - (x[o + i] * r) * c);
  }
}

void RmsNormBackwardWeightChains(const float* x, const float* inv_rms, const float* dy, float* dw, int64_t R,
                                 int64_t n, int64_t i0, int64_t i1, bool accumulate) {
  for (int64_t i = i0; i < i1; ++i) {
    float acc = accumulate ? dw[i] : 0.0f;
    for (int64_t r = 0; r < R; ++r) acc = ref::fma_f32(dy[r * n + i], x[r * n + i] * inv_rms[r], acc);
    dw[i] = acc;
  }
}

void RmsNormBackwardWeight(const float* x, const float* inv_rms, const float* dy, float* dw, int64_t R, int64_t n,
                           int64_t i0, int64_t i1) {
  RmsNormBackwardWeightChains(x, inv_rms, dy, dw, R, n, i0, i1, false);
}

void RmsNormBackwardWeightContinue(const float* x, const float* inv_rms, const float* dy, float* dw, int64_t R,
                                   int64_t n, int64_t i0, int64_t i1) {
  RmsNormBackwardWeightChains(x, inv_rms, dy, dw, R, n, i0, i1, true);
}

void FillNorm(Kernels& k) {
  k.rmsnorm = &ref::rmsnorm<float>;
  k.rmsnorm_rows = &RmsNormRows;
  k.rmsnorm_backward_rows = &RmsNormBackwardRows;
  k.rmsnorm_backward_weight = &RmsNormBackwardWeight;
  k.rmsnorm_backward_weight_continue = &RmsNormBackwardWeightContinue;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
