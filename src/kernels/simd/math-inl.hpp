// The profile's f32 elementary functions on SIMD vectors: each line mirrors kernels/ref/math.hpp,
// so every lane computes the bits the scalar function computes. Included once per Highway target
// (the include guard toggles with HWY_TARGET_TOGGLE), only where HWY_NATIVE_FMA holds.
#if defined(LOCKSTEP_SIMD_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOCKSTEP_SIMD_MATH_INL_H_
#undef LOCKSTEP_SIMD_MATH_INL_H_
#else
#define LOCKSTEP_SIMD_MATH_INL_H_
#endif

#include <hwy/highway.h>

#include <limits>

#include "kernels/ref/math.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

// p * 2^n for n an integer in [-150, 128] and p in [0.5, 2) (exp's last step): the reference's
// (p * 2^a) * 2^(n - a), a = floor(n / 2), whose first product is exact (normal, as a >= -75),
// so that the result is p * 2^n rounded once, to nearest even, subnormal or infinite as it
// falls. AVX-512's vscalefps computes p * 2^floor(n) rounded once under the same rounding (no
// flush to zero: docs/ARITHMETIC.md), the same bits in one instruction where the two powers of
// two take nine. Checked for all 2^32 inputs of exp once by hand (bench/README.md); the
// exactness tests compare a stride through them and every input whose result rounds here.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ScaleByPowerOfTwo(D d, V p, V n) {
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) * sizeof(float) == 64) {
    (void)d;
    return V{_mm512_scalef_ps(p.raw, n.raw)};
  }
#endif
  const hn::RebindToSigned<D> di;
  const auto ni = hn::ConvertTo(di, n);  // n is an integer: exact
  const auto a = hn::ShiftRight<1>(ni);  // arithmetic: floor(n / 2)
  const auto b = hn::Sub(ni, a);
  const auto bias = hn::Set(di, 127);
  const V pa = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(a, bias)));
  const V pb = hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(b, bias)));
  return hn::Mul(hn::Mul(p, pa), pb);
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// x86's maxps(a, b) is per lane (a > b) ? a : b (b when either is NaN, and on a tie of +0 and
// -0), which is max_skip_nan(m, v) with a = v, b = m: one instruction for a compare and a blend.
HWY_INLINE __m128 MaxPs(__m128 a, __m128 b) { return _mm_max_ps(a, b); }
HWY_INLINE __m256 MaxPs(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
#if HWY_TARGET <= HWY_AVX3
HWY_INLINE __m512 MaxPs(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
#endif
#endif

// Exp's steps 3 to 5 (docs/ARITHMETIC.md) for a clamped x and its integer n: the reduction by
// n ln 2, the polynomial, and the scaling by 2^n.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpReduced(D d, V xc, V n) {
  V r = hn::MulAdd(n, hn::Set(d, -ref::kLn2Hi), xc);
  r = hn::MulAdd(n, hn::Set(d, -ref::kLn2Lo), r);
  const V z = hn::Mul(r, r);
  V p = hn::Set(d, ref::kExpP0);
  p = hn::MulAdd(p, r, hn::Set(d, ref::kExpP1));
  p = hn::MulAdd(p, r, hn::Set(d, ref::kExpP2));
  p = hn::MulAdd(p, r, hn::Set(d, ref::kExpP3));
  p = hn::MulAdd(p, r, hn::Set(d, ref::kExpP4));
  p = hn::MulAdd(p, r, hn::Set(d, ref::kExpP5));
  p = hn::MulAdd(p, z, r);
  p = hn::Add(p, hn::Set(d, 1.0f));
  return ScaleByPowerOfTwo(d, p, n);
}

// ref::exp_f32 per lane. Lanes below kExpLower or above kExpUpper compute at the bound, where
// the reference's own steps give +0 and +inf, the values it returns past them (checked by
// ElementaryFunctions.ExpAtItsBoundsIsZeroAndInfinity), so no blend is needed for them; NaN
// lanes, which the clamp turns into a bound, take x back at the end.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Exp(D d, V x) {
  const V xc = hn::Min(hn::Max(x, hn::Set(d, ref::kExpLower)), hn::Set(d, ref::kExpUpper));
  const V magic = hn::Set(d, ref::kRoundMagic);
  const V n = hn::Sub(hn::Add(hn::Mul(xc, hn::Set(d, ref::kLog2e)), magic), magic);
  return hn::IfThenElse(hn::IsNaN(x), x, ExpReduced(d, xc, n));
}

// ref::exp_f32 per lane for x <= 0 or a quiet NaN: a value less the maximum of a set holding it
// (softmax's exp(s - m), where s <= m or s - m is NaN). On x86 (AVX2 and AVX-512) it drops steps
// of Exp that cannot change such an x's result; elsewhere it is Exp.
// - The upper clamp: x never reaches 89.
// - The NaN blend: the lower clamp as maxps(-104, x) returns x when x is NaN, and from there every
//   step returns its one NaN operand (x86 keeps a quiet NaN's payload and sign, whichever operand
//   it is; each NaN below is x, and the powers of two that AVX2's scaling builds from a NaN n have
//   zero mantissas, so are never NaN), so the result is x, what the reference returns. (A
//   signalling NaN would come back quiet; a difference never is one.)
// - On AVX-512, n by one rounding to the nearest integer, ties to even, for adding and subtracting
//   1.5 * 2^23: the same integer for |t| <= 151, except that t in (-0.5, -0] gives -0 where the sum
//   gives +0; then r = fma(n, -ln2, x) is x either way for x != 0, and for x = -0 it is +0 or -0,
//   which makes p = fma(p, r * r, r) = +0 and the result 1 either way.
// The exactness tests compare it with Exp over every float from -0 to -104 and every quiet NaN.
// A lane with x > 0 (a caller's lane past its keys, whose result it drops) gets Exp's value up to
// 89 and +inf or NaN past it.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpOfNonPositive(D d, V x) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  const V xc = V{MaxPs(hn::Set(d, ref::kExpLower).raw, x.raw)};
  const V t = hn::Mul(xc, hn::Set(d, ref::kLog2e));
#if HWY_TARGET <= HWY_AVX3
  if constexpr (hn::MaxLanes(D()) * sizeof(float) == 64) return ExpReduced(d, xc, hn::Round(t));
#endif
  const V magic = hn::Set(d, ref::kRoundMagic);
  return ExpReduced(d, xc, hn::Sub(hn::Add(t, magic), magic));
#else
  return Exp(d, x);
#endif
}

// ref::log_f32 per lane.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Log(D d, V x) {
  const hn::RebindToSigned<D> di;
  using VI = hn::Vec<decltype(di)>;
  const auto subnormal = hn::Lt(x, hn::Set(d, 0x1p-126f));
  const V xs = hn::IfThenElse(subnormal, hn::Mul(x, hn::Set(d, 0x1p23f)), x);
  const VI bits = hn::BitCast(di, xs);
  VI e = hn::Sub(hn::And(hn::ShiftRight<23>(bits), hn::Set(di, 0xff)), hn::Set(di, 126));
  e = hn::IfThenElse(hn::RebindMask(di, subnormal), hn::Sub(e, hn::Set(di, 23)), e);
  const V m = hn::BitCast(d, hn::Or(hn::And(bits, hn::Set(di, 0x007fffff)), hn::Set(di, 0x3f000000)));
  const auto small = hn::Lt(m, hn::Set(d, ref::kSqrtHalf));
  e = hn::IfThenElse(hn::RebindMask(di, small), hn::Sub(e, hn::Set(di, 1)), e);
  const V one = hn::Set(d, 1.0f);
  const V f = hn::IfThenElse(small, hn::Sub(hn::Add(m, m), one), hn::Sub(m, one));
  const V z = hn::Mul(f, f);
  V p = hn::Set(d, ref::kLogP0);
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP1));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP2));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP3));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP4));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP5));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP6));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP7));
  p = hn::MulAdd(p, f, hn::Set(d, ref::kLogP8));
  const V fe = hn::ConvertTo(d, e);
  V y = hn::Mul(hn::Mul(p, f), z);
  y = hn::MulAdd(fe, hn::Set(d, ref::kLn2Lo), y);
  y = hn::MulAdd(z, hn::Set(d, -0.5f), y);
  V result = hn::Add(f, y);
  result = hn::MulAdd(fe, hn::Set(d, ref::kLn2Hi), result);
  const V inf = hn::Set(d, std::numeric_limits<float>::infinity());
  result = hn::IfThenElse(hn::Eq(x, inf), inf, result);
  result = hn::IfThenElse(hn::Eq(x, hn::Zero(d)), hn::Neg(inf), result);
  result = hn::IfThenElse(hn::Lt(x, hn::Zero(d)),
                          hn::Set(d, std::numeric_limits<float>::quiet_NaN()), result);
  return hn::IfThenElse(hn::IsNaN(x), x, result);
}

// ref::silu_f32 per lane: g / (1 + exp(-g)).
template <class D, class V = hn::Vec<D>>
HWY_INLINE V Silu(D d, V g) {
  const V e = Exp(d, hn::Neg(g));
  return hn::Div(g, hn::Add(hn::Set(d, 1.0f), e));
}

// ref::max_skip_nan per lane: m = (v > m) ? v : m.
template <class V>
HWY_INLINE V MaxSkipNaN(V m, V v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return V{MaxPs(v.raw, m.raw)};
#else
  return hn::IfThenElse(hn::Gt(v, m), v, m);
#endif
}

// The max of a vector's lanes with NaN skipped, folded into m. The lane order does not change
// the result's value (only which zero, +0 or -0, wins a tie, and no later step can tell them
// apart: docs/ARITHMETIC.md, "max").
template <class D, class V = hn::Vec<D>>
HWY_INLINE float ReduceMaxSkipNaN(D d, V v, float m) {
  HWY_ALIGN float lanes[HWY_MAX_BYTES / sizeof(float)];
  hn::Store(v, d, lanes);
  for (size_t i = 0; i < hn::Lanes(d); ++i) m = ref::max_skip_nan(m, lanes[i]);
  return m;
}

#endif  // HWY_NATIVE_FMA

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();

#endif  // include guard
