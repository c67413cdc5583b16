#include <limits>

#include "kernels/ref/ops.hpp"

namespace lockstep::ref {
namespace {

// m = max z (NaN skipped) and sum = chain in increasing j of exp(z_j - m), as the forward.
template <typename T>
T shifted_sum(const T* z, int32_t vocab, T* m_out) {
  T m = -std::numeric_limits<T>::infinity();
  for (int32_t j = 0; j < vocab; ++j) m = max_skip_nan(m, z[j]);
  T sum = 0;
  for (int32_t j = 0; j < vocab; ++j) sum = sum + Scalar<T>::exp(z[j] - m);
  *m_out = m;
  return sum;
}

}  // namespace

template <typename T>
T cross_entropy(const T* logits, int32_t vocab, int32_t target) {
  T m;
  const T sum = shifted_sum(logits, vocab, &m);
  const T shifted = logits[target] - m;
  return Scalar<T>::log(sum) - shifted;
}

template <typename T>
void cross_entropy_backward(const T* logits, int32_t vocab, int32_t target, T count, T* dz) {
  T m;
  const T sum = shifted_sum(logits, vocab, &m);
  for (int32_t j = 0; j < vocab; ++j) {
    const T p = Scalar<T>::exp(logits[j] - m) / sum;
    dz[j] = (j == target ? p - T(1) : p) / count;
  }
}

template <typename T>
void embedding_backward(const int32_t* ids, const T* dx, T* d_embed, int64_t R, int32_t vocab, int64_t d) {
  for (int64_t i = 0; i < static_cast<int64_t>(vocab) * d; ++i) d_embed[i] = 0;
  for (int64_t r = 0; r < R; ++r) {
    T* row = d_embed + static_cast<int64_t>(ids[r]) * d;
    for (int64_t i = 0; i < d; ++i) row[i] = row[i] + dx[r * d + i];
  }
}

template float cross_entropy<float>(const float*, int32_t, int32_t);
template double cross_entropy<double>(const double*, int32_t, int32_t);
template void cross_entropy_backward<float>(const float*, int32_t, int32_t, float, float*);
template void cross_entropy_backward<double>(const double*, int32_t, int32_t, double, double*);
template void embedding_backward<float>(const int32_t*, const float*, float*, int64_t, int32_t, int64_t);
template void embedding_backward<double>(const int32_t*, const double*, double*, int64_t, int32_t, int64_t);

}  // namespace lockstep::ref
