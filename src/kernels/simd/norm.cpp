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

void FillNorm(Kernels& k) { k.rmsnorm = &RmsNorm; }

#else

void FillNorm(Kernels& k) { k.rmsnorm = &ref::rmsnorm; }

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
