// 16-bit floats <-> f32, by their bits (exact where the target holds the value); the widenings
// are core/half.hpp's.
#pragma once

#include <cstdint>

#include "core/half.hpp"

namespace lockstep::format {

using lockstep::f32_from_bf16_bits;  // core/half.hpp
using lockstep::f32_from_f16_bits;

// f32 -> binary16 bits, rounded to nearest, ties to even (NumPy's float16, the F16C
// instruction). A finite value past f16's range rounds to infinity; the caller checks.
uint16_t f16_bits_from_f32(float value);

}  // namespace lockstep::format
