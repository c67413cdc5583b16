#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

void matmul(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc = fma_f32(x[m * K + k], w[k * N + n], acc);
      y[m * N + n] = acc;
    }
  }
}

void matmul_bf16(const float* x, const float* w_bf16, float* y, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc = fma_f32(round_bf16(x[m * K + k]), round_bf16(w_bf16[k * N + n]), acc);
      y[m * N + n] = acc;
    }
  }
}

}  // namespace lockstep::ref
