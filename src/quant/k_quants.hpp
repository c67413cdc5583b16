// GGUF's K-quant super-blocks Q4_K, Q5_K and Q6_K (what llama.cpp's Q4_K_M, Q5_K_M and Q6_K files
// hold): 256 consecutive inputs a super-block, in sub-blocks with their own small integer scales
// (and, for Q4_K and Q5_K, minimums) under f16 super-scales. A model of profile lockstep-int8dot-2
// computes on them in integers, a block of 32 inputs at a time (k_quant_block, docs/ARITHMETIC.md
// "K-quant matrices in integers"); one of lockstep-int8dot-1 widens them to f32 when it reads
// them ("K-quant matrices, widened"), with the same values as the embedding lookup takes.
#pragma once

#include <cstdint>
#include <optional>

#include "core/half.hpp"

namespace lockstep::quant {

inline constexpr int kSuperBlockValues = 256;  // inputs per K-quant super-block (ggml's QK_K)

// ggml's type numbers.
enum class KQuantType : uint32_t { q4_k = 12, q5_k = 13, q6_k = 14 };

// "Q4_K", "Q5_K", "Q6_K".
const char* k_quant_name(KQuantType type) noexcept;
// The K-quant type of ggml type number `ggml_type`, if it is one of the three.
std::optional<KQuantType> k_quant_of(uint32_t ggml_type) noexcept;

// Bytes of one super-block: Q4_K 144 (f16 d, f16 dmin, 12 bytes of 6-bit scales and minimums, 128
// of nibbles), Q5_K 176 (the same and 32 bytes of fifth bits before the nibbles), Q6_K 210 (128
// bytes of low nibbles, 64 of high bit pairs, 16 int8 scales, f16 d).
constexpr int64_t super_block_bytes(KQuantType type) {
  return type == KQuantType::q4_k ? 144 : type == KQuantType::q5_k ? 176 : 210;
}

// Sub-block s (inputs 32 s .. 32 s + 31, s in [0, 8)) of a super-block as the integer profile
// takes it: 32 integers and two coefficients c1 = f32(d1) ⊗ s1 and c2 = f32(d2) ⊗ s2, exact
// products of an f16 super-scale (widened exactly) and a small integer scale.
// - Q4_K, Q5_K (`halves` false): q = the 4- or 5-bit value in [0, 31]; d1 = d, s1 = sc[s],
//   d2 = -dmin (the f16's sign flipped), s2 = m[s]: c2 = -(dmin ⊗ m[s]). The value is c1 ⊗ q ⊕ c2.
// - Q6_K (`halves` true): q = the 6-bit value - 32 in [-32, 31]; d1 = d2 = d, s1 = sc[2 s] for
//   q[0..15], s2 = sc[2 s + 1] for q[16..31]. The value is c ⊗ q.
struct KQuantBlock {
  int8_t q[32];
  uint16_t d1 = 0, d2 = 0;  // f16 bits
  int8_t s1 = 0, s2 = 0;
  bool halves = false;
  // Exact: an f16's 11 significant bits by at most 8 (Q6_K's int8) or 6 (Q4_K's, Q5_K's scales).
  float c1() const { return f32_from_f16_bits(d1) * static_cast<float>(s1); }
  float c2() const { return f32_from_f16_bits(d2) * static_cast<float>(s2); }
};
void k_quant_block(KQuantType type, const uint8_t* super_block, int s, KQuantBlock& out);

// The super-block's 256 values in input order, each by the rule of docs/ARITHMETIC.md: Q4_K and
// Q5_K  (d ⊗ sc) ⊗ q ⊖ (dmin ⊗ m), Q6_K  (d ⊗ sc) ⊗ q, in f32 (the f16 fields widened exactly).
// A non-finite super-scale gives non-finite values, which the reader refuses.
void widen_super_block(KQuantType type, const uint8_t* block, float out[kSuperBlockValues]);

}  // namespace lockstep::quant
