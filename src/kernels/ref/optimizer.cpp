#include "kernels/ref/optimizer.hpp"

#include <cmath>

namespace lockstep::ref {

double power_by_squaring(double b, int64_t t) {
  double result = 1.0;
  while (t > 0) {
    if (t & 1) result = result * b;
    b = b * b;
    t >>= 1;
  }
  return result;
}

AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t) {
  const double b1 = beta1, b2 = beta2, rate = lr;
  AdamWScalars s;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.c1 = static_cast<float>(1.0 - b1);
  s.c2 = static_cast<float>(1.0 - b2);
  s.step_size = static_cast<float>(rate / (1.0 - power_by_squaring(b1, t)));
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - power_by_squaring(b2, t)));
  s.decay = static_cast<float>(1.0 - rate * static_cast<double>(weight_decay));
  s.eps = eps;
  return s;
}

void adamw_update(const AdamWScalars& s, float grad_scale, const float* grad, const float* p,
                  const float* m, const float* v, float* p_out, float* m_out, float* v_out, int64_t n) {
  const bool scaled = grad_scale != 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = scaled ? grad[i] * grad_scale : grad[i];
    const float mi = s.beta1 * m[i] + s.c1 * g;
    const float vi = s.beta2 * v[i] + s.c2 * (g * g);
    const float denom = std::sqrt(vi) * s.inv_sqrt_bc2 + s.eps;
    p_out[i] = p[i] * s.decay - s.step_size * (mi / denom);
    m_out[i] = mi;
    v_out[i] = vi;
  }
}

void ema_update(double decay, const float* ema, const float* p, float* ema_out, int64_t n) {
  const float d = static_cast<float>(decay);
  const float c = static_cast<float>(1.0 - decay);
  for (int64_t i = 0; i < n; ++i) ema_out[i] = d * ema[i] + c * p[i];
}

double block_sum_of_squares(const float* g, int64_t n) {
  double total = 0.0;
  for (int64_t b = 0; b < n; b += kNormBlock) {
    const int64_t end = b + kNormBlock < n ? b + kNormBlock : n;
    double block = 0.0;
    for (int64_t i = b; i < end; ++i) block = block + static_cast<double>(g[i]) * static_cast<double>(g[i]);
    total = total + block;
  }
  return total;
}

float clip_scale(double sum_sq, float clip) {
  if (clip <= 0.0f) return 1.0f;
  const double scale = static_cast<double>(clip) / (std::sqrt(sum_sq) + 1e-6);
  return scale < 1.0 ? static_cast<float>(scale) : 1.0f;
}

}  // namespace lockstep::ref
