#include <cmath>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

template <typename T>
void matmul(const T* x, const T* w, T* y, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t k = 0; k < K; ++k) acc = std::fma(x[m * K + k], w[k * N + n], acc);
      y[m * N + n] = acc;
    }
  }
}

void matmul_bf16(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc = fma_f32(round_bf16(x[m * K + k]), round_bf16(w[k * N + n]), acc);
      y[m * N + n] = acc;
    }
  }
}

template <typename T>
void matmul_backward_input(const T* dy, const T* w, T* dx, int64_t M, int64_t K, int64_t N) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) {
      T acc = 0;
      for (int64_t n = 0; n < N; ++n) acc = std::fma(dy[m * N + n], w[k * N + n], acc);
      dx[m * K + k] = acc;
    }
  }
}

template <typename T>
void matmul_backward_weight(const T* x, const T* dy, T* dw, int64_t M, int64_t K, int64_t N) {
  for (int64_t k = 0; k < K; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      T acc = 0;
      for (int64_t m = 0; m < M; ++m) acc = std::fma(x[m * K + k], dy[m * N + n], acc);
      dw[k * N + n] = acc;
    }
  }
}

template void matmul<float>(const float*, const float*, float*, int64_t, int64_t, int64_t);
template void matmul<double>(const double*, const double*, double*, int64_t, int64_t, int64_t);
template void matmul_backward_input<float>(const float*, const float*, float*, int64_t, int64_t, int64_t);
template void matmul_backward_input<double>(const double*, const double*, double*, int64_t, int64_t, int64_t);
template void matmul_backward_weight<float>(const float*, const float*, float*, int64_t, int64_t, int64_t);
template void matmul_backward_weight<double>(const double*, const double*, double*, int64_t, int64_t, int64_t);

}  // namespace lockstep::ref
