#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

void swiglu(const float* gate, const float* up, float* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) h[i] = silu_f32(gate[i]) * up[i];
}

}  // namespace lockstep::ref
