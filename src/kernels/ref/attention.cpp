#include <cmath>
#include <limits>

#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

template <typename T>
T attention_scale(int32_t head_dim) {
  return T(1) / std::sqrt(static_cast<T>(head_dim));
}

template <typename T>
void attention(const T* q, const T* k, const T* v, int64_t stride, int64_t n, int32_t head_dim,
               T scale, T* out, T* scores) {
  T m = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    T dot = 0;
    for (int32_t d = 0; d < head_dim; ++d) dot = std::fma(q[d], k[j * stride + d], dot);
    scores[j] = dot * scale;
    m = max_skip_nan(m, scores[j]);
  }
  for (int32_t d = 0; d < head_dim; ++d) out[d] = 0;
  T l = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T e = Scalar<T>::exp(scores[j] - m);
    l = l + e;
    for (int32_t d = 0; d < head_dim; ++d) out[d] = std::fma(e, v[j * stride + d], out[d]);
  }
  for (int32_t d = 0; d < head_dim; ++d) out[d] = out[d] / l;
}

template <typename T>
void attention_backward(const T* q, int64_t q_stride, const T* k, const T* v, int64_t kv_stride,
                        const T* dout, int64_t dout_stride, T* dq, int64_t dq_stride, T* dk, T* dv, int64_t dkv_stride,
                        int64_t T_len, int32_t group, int32_t head_dim, T scale, T* scratch) {
  // p [group, T, T] and ds [group, T, T] (row t, column j <= t).
  T* p = scratch;
  T* ds = scratch + static_cast<int64_t>(group) * T_len * T_len;
  for (int32_t h = 0; h < group; ++h) {
    for (int64_t t = 0; t < T_len; ++t) {
      const T* qt = q + t * q_stride + static_cast<int64_t>(h) * head_dim;
      const T* dot_ = dout + t * dout_stride + static_cast<int64_t>(h) * head_dim;
      T* pt = p + (static_cast<int64_t>(h) * T_len + t) * T_len;
      T* dst = ds + (static_cast<int64_t>(h) * T_len + t) * T_len;
      // The forward's probabilities: s, m, e, l as attention() computes them, then p = e / l.
      T m = -std::numeric_limits<T>::infinity();
      for (int64_t j = 0; j <= t; ++j) {
        T dot = 0;
        for (int32_t d = 0; d < head_dim; ++d) dot = std::fma(qt[d], k[j * kv_stride + d], dot);
        pt[j] = dot * scale;
        m = max_skip_nan(m, pt[j]);
      }
      T l = 0;
      for (int64_t j = 0; j <= t; ++j) {
        pt[j] = Scalar<T>::exp(pt[j] - m);
        l = l + pt[j];
      }
      for (int64_t j = 0; j <= t; ++j) pt[j] = pt[j] / l;
      // dp_tj, D_t, ds_tj
      T D = 0;
      for (int64_t j = 0; j <= t; ++j) {
        T dp = 0;
        for (int32_t d = 0; d < head_dim; ++d) dp = std::fma(dot_[d], v[j * kv_stride + d], dp);
        dst[j] = dp;
        D = std::fma(pt[j], dp, D);
      }
      for (int64_t j = 0; j <= t; ++j) dst[j] = (pt[j] * (dst[j] - D)) * scale;
      // dq_t = sum over j of ds_tj k_j
      T* dqt = dq + t * dq_stride + static_cast<int64_t>(h) * head_dim;
      for (int32_t d = 0; d < head_dim; ++d) {
        T acc = 0;
        for (int64_t j = 0; j <= t; ++j) acc = std::fma(dst[j], k[j * kv_stride + d], acc);
        dqt[d] = acc;
      }
    }
  }
  // dk_j, dv_j: over the group's heads, then queries t >= j.
  for (int64_t j = 0; j < T_len; ++j) {
    for (int32_t d = 0; d < head_dim; ++d) {
      T acc_k = 0, acc_v = 0;
      for (int32_t h = 0; h < group; ++h) {
        for (int64_t t = j; t < T_len; ++t) {
          const int64_t at = (static_cast<int64_t>(h) * T_len + t) * T_len + j;
          acc_k = std::fma(ds[at], q[t * q_stride + static_cast<int64_t>(h) * head_dim + d], acc_k);
          acc_v = std::fma(p[at], dout[t * dout_stride + static_cast<int64_t>(h) * head_dim + d], acc_v);
        }
      }
      dk[j * dkv_stride + d] = acc_k;
      dv[j * dkv_stride + d] = acc_v;
    }
  }
}

template float attention_scale<float>(int32_t);
template double attention_scale<double>(int32_t);
template void attention<float>(const float*, const float*, const float*, int64_t, int64_t, int32_t, float, float*, float*);
template void attention<double>(const double*, const double*, const double*, int64_t, int64_t, int32_t, double, double*, double*);
template void attention_backward<float>(const float*, int64_t, const float*, const float*, int64_t, const float*,
                                        int64_t, float*, int64_t, float*, float*, int64_t, int64_t, int32_t, int32_t, float, float*);
template void attention_backward<double>(const double*, int64_t, const double*, const double*, int64_t,
                                         const double*, int64_t, double*, int64_t, double*, double*, int64_t, int64_t,
                                         int32_t, int32_t, double, double*);

}  // namespace lockstep::ref
