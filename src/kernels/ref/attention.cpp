#include <cmath>
#include <limits>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

float attention_scale(int32_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

void attention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
               int32_t head_dim, float scale, float* out, float* scores) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    float dot = 0.0f;
    for (int32_t d = 0; d < head_dim; ++d) dot = fma_f32(q[d], k[j * stride + d], dot);
    scores[j] = dot * scale;
    m = max_skip_nan(m, scores[j]);
  }
  for (int32_t d = 0; d < head_dim; ++d) out[d] = 0.0f;
  float l = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_f32(scores[j] - m);
    l = l + e;
    for (int32_t d = 0; d < head_dim; ++d) out[d] = fma_f32(e, v[j * stride + d], out[d]);
  }
  for (int32_t d = 0; d < head_dim; ++d) out[d] = out[d] / l;
}

}  // namespace lockstep::ref
