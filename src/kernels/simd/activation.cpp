// Element-wise kernels: SwiGLU, the residual add and bf16 rounding. Every element is independent,
// so lanes compute exactly what the scalar loop computes.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/activation.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/math-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AddScalar(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] + y[i];
}

void RoundBf16Scalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ref::round_bf16(x[i]);
}

void ExpScalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ref::exp_f32(x[i]);
}

void LogScalar(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = ref::log_f32(x[i]);
}

#if HWY_NATIVE_FMA

using DF = hn::ScalableTag<float>;

void SwiGlu(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, float* HWY_RESTRICT h, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N)
    hn::StoreU(hn::Mul(Silu(d, hn::LoadU(d, gate + i)), hn::LoadU(d, up + i)), d, h + i);
  for (; i < n; ++i) h[i] = ref::silu_f32(gate[i]) * up[i];
}

void Add(float* HWY_RESTRICT x, const float* HWY_RESTRICT y, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(d, x + i), hn::LoadU(d, y + i)), d, x + i);
  for (; i < n; ++i) x[i] = x[i] + y[i];
}

void RoundBf16(const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const DF d;
  const hn::RebindToUnsigned<DF> du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto high = hn::Set(du, 0xffff0000u);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    const auto u = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u));
    const auto rounded = hn::And(hn::Add(hn::Add(u, hn::Set(du, 0x7fffu)), lsb), high);
    const auto quiet = hn::And(hn::Or(u, hn::Set(du, 0x00400000u)), high);
    hn::StoreU(hn::IfThenElse(hn::IsNaN(v), hn::BitCast(d, quiet), hn::BitCast(d, rounded)), d, y + i);
  }
  for (; i < n; ++i) y[i] = ref::round_bf16(x[i]);
}

// y = exp(x), by Exp or (kNonPositive) by ExpOfNonPositive.
template <bool kNonPositive>
void ExpArray(const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(kNonPositive ? ExpOfNonPositive(d, v) : Exp(d, v), d, y + i);
  }
  for (; i < n; ++i) y[i] = ref::exp_f32(x[i]);
}

void LogArray(const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Log(d, hn::LoadU(d, x + i)), d, y + i);
  for (; i < n; ++i) y[i] = ref::log_f32(x[i]);
}

void SwiGluBackward(const float* HWY_RESTRICT gate, const float* HWY_RESTRICT up, const float* HWY_RESTRICT dh,
                    float* HWY_RESTRICT dgate, float* HWY_RESTRICT dup, int64_t n) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto one = hn::Set(d, 1.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::LoadU(d, gate + i);
    const auto dhv = hn::LoadU(d, dh + i);
    const auto denom = hn::Add(one, Exp(d, hn::Neg(g)));
    const auto s = hn::Div(one, denom);
    const auto silu = hn::Div(g, denom);
    hn::StoreU(hn::Mul(dhv, silu), d, dup + i);
    const auto dsilu = hn::Mul(s, hn::Add(one, hn::Mul(g, hn::Sub(one, s))));
    hn::StoreU(hn::Mul(hn::Mul(dhv, hn::LoadU(d, up + i)), dsilu), d, dgate + i);
  }
  if (i < n) ref::swiglu_backward<float>(gate + i, up + i, dh + i, dgate + i, dup + i, n - i);
}

void FillActivation(Kernels& k) {
  k.swiglu = &SwiGlu;
  k.swiglu_backward = &SwiGluBackward;
  k.add = &Add;
  k.round_bf16 = &RoundBf16;
  k.exp = &ExpArray<false>;
  k.log = &LogArray;
  // Its own function only where ExpOfNonPositive differs from Exp (the test sweeps it there).
  k.exp_of_non_positive = HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 ? &ExpArray<true> : &ExpArray<false>;
}

#else

void FillActivation(Kernels& k) {
  k.swiglu = &ref::swiglu<float>;
  k.swiglu_backward = &ref::swiglu_backward<float>;
  k.add = &AddScalar;
  k.round_bf16 = &RoundBf16Scalar;
  k.exp = &ExpScalar;
  k.log = &LogScalar;
  k.exp_of_non_positive = &ExpScalar;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
