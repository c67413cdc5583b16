#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

template <typename T>
void swiglu(const T* gate, const T* up, T* h, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T e = Scalar<T>::exp(-gate[i]);
    h[i] = (gate[i] / (T(1) + e)) * up[i];
  }
}

template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dh, T* dgate, T* dup, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const T g = gate[i];
    const T e = Scalar<T>::exp(-g);
    const T denom = T(1) + e;
    const T s = T(1) / denom;
    const T silu = g / denom;
    dup[i] = dh[i] * silu;
    dgate[i] = (dh[i] * up[i]) * (s * (T(1) + g * (T(1) - s)));
  }
}

template void swiglu<float>(const float*, const float*, float*, int64_t);
template void swiglu<double>(const double*, const double*, double*, int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*, int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*, double*, int64_t);

}  // namespace lockstep::ref
