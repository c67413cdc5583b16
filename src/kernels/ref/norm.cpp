#include <cmath>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  float ss = 0.0f;
  for (int64_t i = 0; i < n; ++i) ss = fma_f32(x[i], x[i], ss);
  const float mean = ss / static_cast<float>(n);
  const float r = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

}  // namespace lockstep::ref
