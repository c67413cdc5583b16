// The f32 elementary functions of the arithmetic profile (docs/ARITHMETIC.md, "Elementary
// functions"), written from IEEE-754 add, multiply, divide, sqrt and explicit fma only. No libm
// transcendental is called: libm's results differ between libraries, and these must be the same
// bits in the scalar reference, in every SIMD target (kernels/simd/math-inl.hpp mirrors each
// line) and on a GPU later.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace lockstep::ref {

// Constants named as docs/ARITHMETIC.md names them.
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: (t + M) - M rounds t to even
inline constexpr float kLn2Hi = 0.693359375f;       // 9 significant bits: n * kLn2Hi is exact
inline constexpr float kLn2Lo = -2.12194440e-4f;    // ln 2 - kLn2Hi
inline constexpr float kExpUpper = 89.0f;           // above: +inf
inline constexpr float kExpLower = -104.0f;         // below: +0 (e^-104 rounds to 0 in f32)
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;
inline constexpr float kSqrtHalf = 0.707106781186547524f;
inline constexpr float kLogP0 = 7.0376836292e-2f;
inline constexpr float kLogP1 = -1.1514610310e-1f;
inline constexpr float kLogP2 = 1.1676998740e-1f;
inline constexpr float kLogP3 = -1.2420140846e-1f;
inline constexpr float kLogP4 = 1.4249322787e-1f;
inline constexpr float kLogP5 = -1.6668057665e-1f;
inline constexpr float kLogP6 = 2.0000714765e-1f;
inline constexpr float kLogP7 = -2.4999993993e-1f;
inline constexpr float kLogP8 = 3.3333331174e-1f;

inline float fma_f32(float a, float b, float c) { return std::fma(a, b, c); }

// 2^k as f32 for -126 <= k <= 127, from its bits.
inline float pow2_f32(int32_t k) {
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// e^x: n = round(x log2 e); r = x - n ln2 in two fma steps; e^r by a degree-7 polynomial;
// scaled by 2^n as two exact-then-rounding multiplies so a subnormal result rounds once.
inline float exp_f32(float x) {
  if (x != x) return x;
  if (x > kExpUpper) return std::numeric_limits<float>::infinity();
  if (x < kExpLower) return 0.0f;
  const float n = (x * kLog2e + kRoundMagic) - kRoundMagic;
  float r = fma_f32(n, -kLn2Hi, x);
  r = fma_f32(n, -kLn2Lo, r);
  const float z = r * r;
  float p = kExpP0;
  p = fma_f32(p, r, kExpP1);
  p = fma_f32(p, r, kExpP2);
  p = fma_f32(p, r, kExpP3);
  p = fma_f32(p, r, kExpP4);
  p = fma_f32(p, r, kExpP5);
  p = fma_f32(p, z, r);
  p = p + 1.0f;
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t a = ni >> 1;  // floor(n / 2)
  return (p * pow2_f32(a)) * pow2_f32(ni - a);
}

// Natural log: x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(1 + f) by a degree-10 polynomial;
// e ln 2 added in two parts.
inline float log_f32(float x) {
  if (x != x) return x;
  if (x < 0.0f) return std::numeric_limits<float>::quiet_NaN();
  if (x == 0.0f) return -std::numeric_limits<float>::infinity();
  if (x == std::numeric_limits<float>::infinity()) return x;
  int32_t e = 0;
  if (x < 0x1p-126f) {  // subnormal: exact scaling into the normal range
    x = x * 0x1p23f;
    e = -23;
  }
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  e += static_cast<int32_t>((bits >> 23) & 0xff) - 126;
  float m = std::bit_cast<float>((bits & 0x007fffffu) | 0x3f000000u);  // [0.5, 1)
  float f;
  if (m < kSqrtHalf) {
    e -= 1;
    f = (m + m) - 1.0f;
  } else {
    f = m - 1.0f;
  }
  const float z = f * f;
  float p = kLogP0;
  p = fma_f32(p, f, kLogP1);
  p = fma_f32(p, f, kLogP2);
  p = fma_f32(p, f, kLogP3);
  p = fma_f32(p, f, kLogP4);
  p = fma_f32(p, f, kLogP5);
  p = fma_f32(p, f, kLogP6);
  p = fma_f32(p, f, kLogP7);
  p = fma_f32(p, f, kLogP8);
  const float fe = static_cast<float>(e);
  float y = (p * f) * z;
  y = fma_f32(fe, kLn2Lo, y);
  y = fma_f32(z, -0.5f, y);
  float result = f + y;
  result = fma_f32(fe, kLn2Hi, result);
  return result;
}

// SiLU(g) = g / (1 + e^-g).
inline float silu_f32(float g) {
  const float e = exp_f32(-g);
  return g / (1.0f + e);
}

// The greater of m and v with NaN skipped: v replaces m only when v > m.
template <typename T>
inline T max_skip_nan(T m, T v) { return v > m ? v : m; }

// f32 rounded to the nearest bf16, ties to even, returned as f32 (its low 16 bits zero). NaN
// stays NaN (quieted).
inline float round_bf16(float x) {
  uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::bit_cast<float>((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xffff0000u);
}

}  // namespace lockstep::ref
