#include "quant/q4.hpp"

#include <algorithm>
#include <cmath>

#include "core/host_math.hpp"

namespace lockstep::quant {

void pack_q4(const float* w, int64_t K, int64_t N, uint8_t* packed, float* scale) {
  const int64_t G = q4_groups(K), row = q4_row_bytes(N);
  for (int64_t g = 0; g < G; ++g) {
    for (int64_t n = 0; n < N; ++n) {
      float amax = 0.0f;
      for (int64_t k = g * kQ4Group; k < std::min(K, (g + 1) * kQ4Group); ++k) amax = std::fmax(amax, std::fabs(w[k * N + n]));
      scale[g * N + n] = amax / 7.0f;
    }
  }
  std::fill_n(packed, K * row, uint8_t{0});
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      const float s = scale[(k / kQ4Group) * N + n];
      int q = 0;
      if (s != 0.0f) {
        double r = host_round(static_cast<double>(w[k * N + n] / s));
        r = r < -7.0 ? -7.0 : (r > 7.0 ? 7.0 : r);
        q = static_cast<int>(r);
      }
      const uint8_t nibble = static_cast<uint8_t>(q & 0xF);
      packed[k * row + n / 2] |= static_cast<uint8_t>(n % 2 == 0 ? nibble : nibble << 4);
    }
  }
}

void expand_q4(const uint8_t* packed, const float* scale, int64_t K, int64_t N, float* w) {
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      w[k * N + n] = static_cast<float>(q4_value(packed, N, k, n)) * scale[(k / kQ4Group) * N + n];
}

std::string check_q4(const uint8_t* packed, int64_t K, int64_t N) {
  const int64_t row = q4_row_bytes(N);
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n)
      if (q4_value(packed, N, k, n) == -8)
        return "value -8 (outside [-7, 7]) at row " + std::to_string(k) + ", column " + std::to_string(n);
    if (N % 2 == 1 && (packed[k * row + row - 1] >> 4) != 0)
      return "padding nibble is not 0 at row " + std::to_string(k);
  }
  return "";
}

}  // namespace lockstep::quant
