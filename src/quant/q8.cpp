#include "quant/q8.hpp"

#include <cmath>

#include "core/host_math.hpp"

namespace lockstep::quant {

void pack_q8(const float* w, int64_t K, int64_t N, int8_t* q, float* scale) {
  for (int64_t n = 0; n < N; ++n) {
    float amax = 0.0f;
    for (int64_t k = 0; k < K; ++k) amax = std::fmax(amax, std::fabs(w[k * N + n]));
    scale[n] = amax / 127.0f;
  }
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      if (scale[n] == 0.0f) {
        q[k * N + n] = 0;
        continue;
      }
      double r = host_round(static_cast<double>(w[k * N + n] / scale[n]));
      r = r < -127.0 ? -127.0 : (r > 127.0 ? 127.0 : r);
      q[k * N + n] = static_cast<int8_t>(r);
    }
  }
}

void expand_q8(const int8_t* q, const float* scale, int64_t K, int64_t N, float* w) {
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) w[k * N + n] = static_cast<float>(q[k * N + n]) * scale[n];
}

}  // namespace lockstep::quant
