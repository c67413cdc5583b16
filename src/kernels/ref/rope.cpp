#include "core/host_math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep::ref {

template <typename T>
void rope(T* v, int32_t n_heads, int32_t head_dim, const T* cos_row, const T* sin_row) {
  for (int32_t h = 0; h < n_heads; ++h) {
    T* x = v + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < head_dim / 2; ++i) {
      const T c = cos_row[i], s = sin_row[i];
      const T v0 = x[2 * i], v1 = x[2 * i + 1];
      x[2 * i] = v0 * c - v1 * s;
      x[2 * i + 1] = v0 * s + v1 * c;
    }
  }
}

template <typename T>
void rope_backward(T* dv, int32_t n_heads, int32_t head_dim, const T* cos_row, const T* sin_row) {
  for (int32_t h = 0; h < n_heads; ++h) {
    T* x = dv + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = 0; i < head_dim / 2; ++i) {
      const T c = cos_row[i], s = sin_row[i];
      const T d0 = x[2 * i], d1 = x[2 * i + 1];
      x[2 * i] = d0 * c + d1 * s;
      x[2 * i + 1] = d1 * c - d0 * s;
    }
  }
}

template <typename T>
void rope_tables(int32_t length, int32_t head_dim, float theta, T* cos_out, T* sin_out,
                 const RopeLlama3* llama3) {
  const int32_t half = head_dim / 2;
  const double log_theta = host_log(static_cast<double>(theta));
  for (int32_t i = 0; i < half; ++i) {
    // freq_i = theta^(-2i / head_dim)
    const double exponent = static_cast<double>(2 * i) / static_cast<double>(head_dim);
    double freq = host_exp(-exponent * log_theta);
    if (llama3) {
      // Wavelengths past original / low_freq_factor are slowed by `factor`, those under
      // original / high_freq_factor kept, and those between blended (each op in f64).
      const RopeLlama3& s = *llama3;
      const double wavelen = (2.0 * kHostPi) / freq;
      const double low_wavelen = s.original_max_position / s.low_freq_factor;
      const double high_wavelen = s.original_max_position / s.high_freq_factor;
      if (wavelen > low_wavelen) {
        freq = freq / s.factor;
      } else if (!(wavelen < high_wavelen)) {
        const double smooth = (s.original_max_position / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        freq = ((1.0 - smooth) * freq) / s.factor + smooth * freq;
      }
    }
    for (int32_t pos = 0; pos < length; ++pos) {
      double s, c;
      host_sincos(static_cast<double>(pos) * freq, &s, &c);
      cos_out[static_cast<int64_t>(pos) * half + i] = static_cast<T>(c);
      sin_out[static_cast<int64_t>(pos) * half + i] = static_cast<T>(s);
    }
  }
}

template void rope<float>(float*, int32_t, int32_t, const float*, const float*);
template void rope<double>(double*, int32_t, int32_t, const double*, const double*);
template void rope_backward<float>(float*, int32_t, int32_t, const float*, const float*);
template void rope_backward<double>(double*, int32_t, int32_t, const double*, const double*);
template void rope_tables<float>(int32_t, int32_t, float, float*, float*, const RopeLlama3*);
template void rope_tables<double>(int32_t, int32_t, float, double*, double*, const RopeLlama3*);

}  // namespace lockstep::ref
