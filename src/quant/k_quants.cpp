#include "quant/k_quants.hpp"

#include "core/half.hpp"

namespace lockstep::quant {
namespace {

uint16_t f16_bits_at(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// Q4_K's and Q5_K's 12 bytes of eight 6-bit scales and eight 6-bit minimums (ggml's
// get_scale_min_k4): sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (minimums);
// sub-blocks 4-7 in the nibbles of bytes 8-11 with their top two bits in the spare bits of bytes
// 0-3 (scales) and 4-7 (minimums).
void scale_and_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

}  // namespace

const char* k_quant_name(KQuantType type) noexcept {
  switch (type) {
    case KQuantType::q4_k: return "Q4_K";
    case KQuantType::q5_k: return "Q5_K";
    case KQuantType::q6_k: return "Q6_K";
  }
  return "?";
}

std::optional<KQuantType> k_quant_of(uint32_t ggml_type) noexcept {
  for (KQuantType t : {KQuantType::q4_k, KQuantType::q5_k, KQuantType::q6_k})
    if (static_cast<uint32_t>(t) == ggml_type) return t;
  return std::nullopt;
}

void k_quant_block(KQuantType type, const uint8_t* block, int s, KQuantBlock& out) {
  if (type == KQuantType::q6_k) {
    // 16 sub-blocks of 16 values: value i (of 256) is in half h = i / 128; within it, r = i % 128,
    // l = r % 32, quarter r / 32 picks the low (0, 1) or high (2, 3) nibble of ql[64 h + l] or
    // ql[64 h + 32 + l], and bits 2 * quarter, + 1 of qh[32 h + l] are its top two bits.
    const uint8_t* ql = block;
    const uint8_t* qh = block + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
    for (int j = 0; j < 32; ++j) {
      const int i = 32 * s + j, h = i / 128, r = i % 128, l = r % 32, quarter = r / 32;
      const uint8_t low_byte = ql[64 * h + (quarter % 2) * 32 + l];
      const int low = quarter < 2 ? low_byte & 15 : low_byte >> 4;
      const int high = (qh[32 * h + l] >> (2 * quarter)) & 3;
      out.q[j] = static_cast<int8_t>((low | (high << 4)) - 32);  // in [-32, 31]
    }
    out.d1 = out.d2 = f16_bits_at(block + 208);
    out.s1 = sc[2 * s];
    out.s2 = sc[2 * s + 1];
    out.halves = true;
  } else {
    // Q4_K, Q5_K: 8 sub-blocks of 32; sub-blocks 2p and 2p + 1 take the low and high nibbles of
    // the 32 bytes qs[32 p .. 32 p + 31]; Q5_K's fifth bit of value l of sub-block s is bit s of qh[l].
    const bool five = type == KQuantType::q5_k;
    const uint8_t* qh = block + 16;
    const uint8_t* qs = block + (five ? 48 : 16);
    int sc = 0, m = 0;
    scale_and_min(block + 4, s, sc, m);
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[32 * (s / 2) + l];
      int q = s % 2 == 0 ? byte & 15 : byte >> 4;
      if (five) q |= ((qh[l] >> s) & 1) << 4;
      out.q[l] = static_cast<int8_t>(q);
    }
    out.d1 = f16_bits_at(block);
    out.d2 = static_cast<uint16_t>(f16_bits_at(block + 2) ^ 0x8000u);  // -dmin: exact
    out.s1 = static_cast<int8_t>(sc);
    out.s2 = static_cast<int8_t>(m);
    out.halves = false;
  }
}

void widen_super_block(KQuantType type, const uint8_t* block, float out[kSuperBlockValues]) {
  KQuantBlock kb;
  for (int s = 0; s < kSuperBlockValues / 32; ++s) {
    k_quant_block(type, block, s, kb);
    const float c1 = kb.c1(), c2 = kb.c2();
    for (int j = 0; j < 32; ++j) {
      const float q = static_cast<float>(kb.q[j]);
      // Q6_K: one rounding. Q4_K, Q5_K: c1 ⊗ q is exact (at most 17 + 5 significant bits), and
      // adding c2 = -(dmin ⊗ m) is the subtraction (dmin ⊗ m) taken off, rounded once.
      out[32 * s + j] = kb.halves ? (j < 16 ? c1 : c2) * q : c1 * q + c2;
    }
  }
}

}  // namespace lockstep::quant
