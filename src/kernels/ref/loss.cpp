#include <limits>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

float cross_entropy(const float* logits, int32_t vocab, int32_t target) {
  float m = -std::numeric_limits<float>::infinity();
  for (int32_t j = 0; j < vocab; ++j) m = max_skip_nan(m, logits[j]);
  float sum = 0.0f;
  for (int32_t j = 0; j < vocab; ++j) sum = sum + exp_f32(logits[j] - m);
  const float shifted = logits[target] - m;
  return log_f32(sum) - shifted;
}

}  // namespace lockstep::ref
