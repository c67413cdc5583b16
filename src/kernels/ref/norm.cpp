#include <cmath>

#include "kernels/ref/ops.hpp"

namespace lockstep::ref {
namespace {

// 1 / sqrt(mean(x^2) + eps), the sum of squares one fma chain in increasing i.
template <typename T>
T inverse_rms(const T* x, int64_t n, T eps) {
  T ss = 0;
  for (int64_t i = 0; i < n; ++i) ss = std::fma(x[i], x[i], ss);
  const T mean = ss / static_cast<T>(n);
  return T(1) / std::sqrt(mean + eps);
}

}  // namespace

template <typename T>
void rmsnorm(const T* x, const T* w, T* y, int64_t n, T eps) {
  const T r = inverse_rms(x, n, eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * r) * w[i];
}

template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t R, int64_t n, T eps) {
  for (int64_t i = 0; i < n; ++i) dw[i] = 0;
  for (int64_t row = 0; row < R; ++row) {
    const T* xr = x + row * n;
    const T* dyr = dy + row * n;
    const T r = inverse_rms(xr, n, eps);
    T s = 0;
    for (int64_t i = 0; i < n; ++i) s = std::fma(dyr[i] * w[i], xr[i] * r, s);
    const T c = s / static_cast<T>(n);
    for (int64_t i = 0; i < n; ++i) {
      const T xhat = xr[i] * r;
      dx[row * n + i] = r * (dyr[i] * w[i] - xhat * c);
      dw[i] = std::fma(dyr[i], xhat, dw[i]);
    }
  }
}

template void rmsnorm<float>(const float*, const float*, float*, int64_t, float);
template void rmsnorm<double>(const double*, const double*, double*, int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, float*, float*, int64_t, int64_t, float);
template void rmsnorm_backward<double>(const double*, const double*, const double*, double*, double*, int64_t, int64_t, double);

}  // namespace lockstep::ref
