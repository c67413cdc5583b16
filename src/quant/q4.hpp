// Packed 4-bit weights ("q4"): each matrix [K, N] (in_out) is stored as signed 4-bit values in
// [-7, 7], two to a byte, with one f32 scale per group of 32 inputs (rows k) per output column;
// the last group of a column is partial when K is not a multiple of 32. Loading expands every
// weight exactly to w = float(q) * scale[k / 32, n] (one rounded multiply). docs/FORMAT.md,
// "Packed weights (q4)". The codec alone, as quant/q8.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace lockstep::quant {

inline constexpr int64_t kQ4Group = 32;  // inputs (rows k) per scale

inline int64_t q4_groups(int64_t K) { return (K + kQ4Group - 1) / kQ4Group; }
inline int64_t q4_row_bytes(int64_t N) { return (N + 1) / 2; }

// The value at (k, n) of packed [K, q4_row_bytes(N)]: column 2j in the low nibble of byte
// (k, j), column 2j + 1 in its high nibble, each a 4-bit two's complement value.
inline int q4_value(const uint8_t* packed, int64_t N, int64_t k, int64_t n) {
  const uint8_t byte = packed[k * q4_row_bytes(N) + n / 2];
  const int nibble = (n % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return nibble >= 8 ? nibble - 16 : nibble;
}

// scale[g, n] = max over the group's rows of |w[k, n]| / 7 (f32, 0 for an all-zero group);
// q[k, n] = round-half-even(w[k, n] / scale[k / 32, n]) clamped to [-7, 7] (0 where the scale is
// 0). packed [K, q4_row_bytes(N)], scale [q4_groups(K), N]; an odd N's last high nibble is 0.
void pack_q4(const float* w, int64_t K, int64_t N, uint8_t* packed, float* scale);
// w[k, n] = float(q[k, n]) * scale[k / 32, n].
void expand_q4(const uint8_t* packed, const float* scale, int64_t K, int64_t N, float* w);
// "" when every nibble is in [-7, 7] and every padding nibble is 0; else what is wrong and where.
std::string check_q4(const uint8_t* packed, int64_t K, int64_t N);

// One matrix as the file holds it.
struct Q4Matrix {
  int64_t K = 0, N = 0;
  std::vector<uint8_t> packed;  // [K, q4_row_bytes(N)]
  std::vector<float> scale;     // [q4_groups(K), N]
};
using Q4Matrices = std::unordered_map<int64_t, Q4Matrix>;  // by registry offset

}  // namespace lockstep::quant
