// A counter-based random number generator: Philox4x32-10 (Salmon, Moraes, Dror and Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC 2011). Every value is a pure function of
// (seed, stream, index), so any draw can be regenerated alone, in any order, on any thread:
// weight initialisation, training windows and sampling all key it by what they are computing.
// No std:: distributions are used; their output differs between standard libraries.
#pragma once

#include <array>
#include <cstdint>

namespace lockstep {

using PhiloxBlock = std::array<uint32_t, 4>;

// Ten rounds of Philox4x32 over `counter` with `key`.
PhiloxBlock philox4x32(PhiloxBlock counter, std::array<uint32_t, 2> key);

// 128 random bits for (seed, stream, index).
PhiloxBlock random_block(uint64_t seed, uint64_t stream, uint64_t index);
uint64_t random_u64(uint64_t seed, uint64_t stream, uint64_t index);
// Uniform in [0, n) without modulo bias (Lemire's multiply-shift with rejection, drawing further
// indices of a sub-stream when it rejects, so the result stays a pure function of the key).
uint64_t random_below(uint64_t n, uint64_t seed, uint64_t stream, uint64_t index);
// Uniform double in (0, 1): 53 random bits, centred in their interval, never 0 or 1.
double random_open01(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal by Box-Muller from one block, with lockstep's own log and cos
// (core/host_math.hpp), so the bits are the same everywhere.
double random_normal(uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace lockstep
