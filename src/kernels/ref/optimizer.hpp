// The optimizer's element-wise updates (docs/ARITHMETIC.md, "AdamW", "EMA", "Clipping"). They
// use no fma, so an independent NumPy float32 implementation can check them bit for bit.
#pragma once

#include <cstdint>

namespace lockstep::ref {

// The per-step scalars of AdamW at step t (1-based), each computed in f64 from the f32 options
// and rounded once to f32.
struct AdamWScalars {
  float beta1, beta2;  // as given
  float c1, c2;        // 1 - beta1, 1 - beta2
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float decay;         // 1 - lr * weight_decay
  float eps;
};
AdamWScalars adamw_scalars(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t);
// b^t by square-and-multiply in f64, from the lowest bit of t.
double power_by_squaring(double b, int64_t t);

// For i in [0, n): g = grad[i] * grad_scale (only when grad_scale != 1);
//   m = beta1 * m + c1 * g;  v = beta2 * v + c2 * (g * g);
//   denom = sqrt(v) * inv_sqrt_bc2 + eps;  p = p * decay - step_size * (m / denom)
// each operation rounded, in this order. Writes the new values to p_out, m_out, v_out.
void adamw_update(const AdamWScalars& s, float grad_scale, const float* grad, const float* p,
                  const float* m, const float* v, float* p_out, float* m_out, float* v_out, int64_t n);

// ema_out[i] = decay * ema[i] + (1 - decay) * p[i], with decay and 1 - decay rounded to f32
// from the f64 value the caller gives.
void ema_update(double decay, const float* ema, const float* p, float* ema_out, int64_t n);

// The global L2 norm's square of g [n] in f64: blocks of kNormBlock elements each summed in
// increasing i from +0 (squares of f32 are exact in f64), then the block sums added in
// increasing block order. `partials` receives the block sums when not null.
inline constexpr int64_t kNormBlock = 8192;
double block_sum_of_squares(const float* g, int64_t n);
// The clipping factor for a gradient of norm sqrt(sum_sq): min(1, clip / (norm + 1e-6)) in f64,
// rounded to f32; 1 when clip is 0.
float clip_scale(double sum_sq, float clip);

}  // namespace lockstep::ref
