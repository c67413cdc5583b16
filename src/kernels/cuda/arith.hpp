// The arithmetic of the CUDA kernels (docs/ARITHMETIC.md, docs/CUDA.md), written once for the GPU
// and the host. Every body in kernels/cuda is a `LOCKSTEP_HD` function built from these: under
// nvcc's device pass (__CUDA_ARCH__) each is the intrinsic that rounds once to nearest even
// (__fmaf_rn, __fmul_rn, __fadd_rn, __fsub_rn, __fdiv_rn, __fsqrt_rn: never contracted, never
// flushed to zero, whatever the flags); on the host (g++ in the tests, or nvcc's host pass) the
// plain IEEE operation, which -ffp-contract=off keeps unfused. exp is the profile's own,
// line for line kernels/ref/math.hpp's exp_f32, so a host run of a body computes the reference's
// bits, and so does the GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__CUDACC__)
#define LOCKSTEP_HD __host__ __device__
#else
#define LOCKSTEP_HD
#endif

namespace lockstep::cuda {

LOCKSTEP_HD inline float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
LOCKSTEP_HD inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LOCKSTEP_HD inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOCKSTEP_HD inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
LOCKSTEP_HD inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
LOCKSTEP_HD inline float sqrt_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

LOCKSTEP_HD inline float float_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
LOCKSTEP_HD inline uint32_t bits_of(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

inline constexpr float kInfinity = std::numeric_limits<float>::infinity();

// 2^k for -126 <= k <= 127, from its bits.
LOCKSTEP_HD inline float pow2(int32_t k) { return float_from_bits(static_cast<uint32_t>(k + 127) << 23); }

// kernels/ref/math.hpp's exp_f32, step for step (its constants written out: a constexpr of the
// host is no value the device may read).
LOCKSTEP_HD inline float exp_f32(float x) {
  if (x != x) return x;
  if (x > 89.0f) return kInfinity;
  if (x < -104.0f) return 0.0f;
  const float n = sub_rn(add_rn(mul_rn(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
  float r = fma_rn(n, -0.693359375f, x);
  r = fma_rn(n, 2.12194440e-4f, r);
  const float z = mul_rn(r, r);
  float p = 1.9875691500e-4f;
  p = fma_rn(p, r, 1.3981999507e-3f);
  p = fma_rn(p, r, 8.3334519073e-3f);
  p = fma_rn(p, r, 4.1665795894e-2f);
  p = fma_rn(p, r, 1.6666665459e-1f);
  p = fma_rn(p, r, 5.0000001201e-1f);
  p = fma_rn(p, z, r);
  p = add_rn(p, 1.0f);
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t a = ni >> 1;  // floor(n / 2)
  return mul_rn(mul_rn(p, pow2(a)), pow2(ni - a));
}

// The greater of m and v with NaN skipped (v replaces m only when v > m).
LOCKSTEP_HD inline float max_skip_nan(float m, float v) { return v > m ? v : m; }

// kernels/ref/math.hpp's round_bf16: f32 to the nearest bf16, ties to even, NaN quieted.
LOCKSTEP_HD inline float round_bf16(float x) {
  uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return float_from_bits((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return float_from_bits(u & 0xffff0000u);
}

// The position of a thread in its launch, as the device gives it (blockIdx, threadIdx) and as a
// host loop over the grid hands it to a body.
struct ThreadAt {
  int64_t block_x = 0;
  int32_t block_y = 0;
  int32_t thread = 0;  // threadIdx.x (every kernel here is one-dimensional in its block)
};

}  // namespace lockstep::cuda
