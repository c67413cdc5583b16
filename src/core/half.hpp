// 16-bit floats widened to f32, by their bits: exact, since every binary16 and bfloat16 value is
// an f32 value. Below format (GGUF's f16 block scales are read by quant/ and the kernels too).
#pragma once

#include <cstdint>
#include <cstring>

namespace lockstep {

// bfloat16 is f32's upper half: widening is exact.
inline float f32_from_bf16_bits(uint16_t h) {
  const uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// IEEE binary16 widened exactly (subnormals included; infinities and NaN kept).
inline float f32_from_f16_bits(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    x = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    x = sign;
  } else {  // subnormal: mant * 2^-24, normalised
    uint32_t e = 113u;  // f32 biased exponent of 2^-14
    while ((mant & 0x400u) == 0) mant <<= 1, --e;
    x = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace lockstep
