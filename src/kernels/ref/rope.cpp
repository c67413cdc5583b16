#include "core/host_math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

void rope(float* v, int32_t n_heads, int32_t head_dim, const float* cos_row, const float* sin_row) {
  for (int32_t h = 0; h < n_heads; ++h) {
    float* x = v + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < head_dim / 2; ++i) {
      const float c = cos_row[i], s = sin_row[i];
      const float v0 = x[2 * i], v1 = x[2 * i + 1];
      x[2 * i] = v0 * c - v1 * s;
      x[2 * i + 1] = v0 * s + v1 * c;
    }
  }
}

void rope_tables(int32_t length, int32_t head_dim, float theta, float* cos_out, float* sin_out) {
  const int32_t half = head_dim / 2;
  const double log_theta = host_log(static_cast<double>(theta));
  for (int32_t i = 0; i < half; ++i) {
    // freq_i = theta^(-2i / head_dim)
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(head_dim);
    const double freq = host_exp(-exponent * log_theta);
    for (int32_t pos = 0; pos < length; ++pos) {
      double s, c;
      host_sincos(static_cast<double>(pos) * freq, &s, &c);
      cos_out[static_cast<int64_t>(pos) * half + i] = static_cast<float>(c);
      sin_out[static_cast<int64_t>(pos) * half + i] = static_cast<float>(s);
    }
  }
}

}  // namespace lockstep::ref
