#include <cmath>
#include <vector>

#include "kernels/ref/blocks.hpp"
#include "kernels/ref/math.hpp"

namespace lockstep::ref {

using quant::kBlockValues;

void quantize_activations(const float* x, int64_t K, int8_t* qx, float* dx) {
  for (int64_t b = 0; b < K / kBlockValues; ++b) {
    const float* xb = x + b * kBlockValues;
    int8_t* qb = qx + b * kBlockValues;
    float amax = 0.0f;
    for (int j = 0; j < kBlockValues; ++j) {
      const float a = std::fabs(xb[j]);  // clears the sign bit
      amax = a > amax ? a : amax;
    }
    const float d = amax / 127.0f;
    dx[b] = d;
    for (int j = 0; j < kBlockValues; ++j) {
      if (d == 0.0f) {
        qb[j] = 0;
        continue;
      }
      // Round half to even by adding and subtracting 1.5 * 2^23 (|q| < 2^22 here: q <= 127 for a
      // normal d, under 255 for a subnormal one rounded down), then the clamp.
      float q = (xb[j] / d + 12582912.0f) - 12582912.0f;
      q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
      qb[j] = static_cast<int8_t>(q);
    }
  }
}

int32_t block_dot(const int8_t* w, const int8_t* qx) {
  int32_t isum = 0;
  for (int j = 0; j < kBlockValues; ++j) isum += static_cast<int32_t>(w[j]) * static_cast<int32_t>(qx[j]);
  return isum;
}

int32_t half_dot(const int8_t* w, const int8_t* qx) {
  int32_t isum = 0;
  for (int j = 0; j < kBlockValues / 2; ++j) isum += static_cast<int32_t>(w[j]) * static_cast<int32_t>(qx[j]);
  return isum;
}

float block_chain_step(const quant::RowBlock& w, const int8_t* qx, float dx, float acc) {
  using Form = quant::RowBlock::Form;
  switch (w.form) {
    case Form::scaled: return fma_f32(static_cast<float>(block_dot(w.q, qx)), w.c1 * dx, acc);
    case Form::halves:
      acc = fma_f32(static_cast<float>(half_dot(w.q, qx)), w.c1 * dx, acc);
      return fma_f32(static_cast<float>(half_dot(w.q + 16, qx + 16)), w.c2 * dx, acc);
    case Form::minus_min: {
      int32_t xsum = 0;
      for (int j = 0; j < kBlockValues; ++j) xsum += qx[j];
      acc = fma_f32(static_cast<float>(block_dot(w.q, qx)), w.c1 * dx, acc);
      return fma_f32(static_cast<float>(xsum), w.c2 * dx, acc);
    }
  }
  return acc;
}

void matmul_blocks_quantized(const int8_t* qx, const float* dx, const uint8_t* w, quant::BlockType type, float* y,
                             int64_t M, int64_t K, int64_t N) {
  const int64_t blocks = K / kBlockValues, row_bytes = quant::block_row_bytes(type, K);
  quant::RowBlock block;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t b = 0; b < blocks; ++b) {
        quant::row_block(type, w + n * row_bytes, b, block);
        acc = block_chain_step(block, qx + m * K + b * kBlockValues, dx[m * blocks + b], acc);
      }
      y[m * N + n] = acc;
    }
  }
}

void matmul_blocks(const float* x, const uint8_t* w, quant::BlockType type, float* y, int64_t M, int64_t K,
                   int64_t N) {
  std::vector<int8_t> qx(static_cast<size_t>(M * K));
  std::vector<float> dx(static_cast<size_t>(M * (K / kBlockValues)));
  for (int64_t m = 0; m < M; ++m)
    quantize_activations(x + m * K, K, qx.data() + m * K, dx.data() + m * (K / kBlockValues));
  matmul_blocks_quantized(qx.data(), dx.data(), w, type, y, M, K, N);
}

void embed_blocks(const uint8_t* row, quant::BlockType type, int64_t d, float* out) {
  quant::RowBlock block;
  for (int64_t b = 0; b < d / kBlockValues; ++b) {
    quant::row_block(type, row, b, block);
    for (int j = 0; j < kBlockValues; ++j) out[b * kBlockValues + j] = block.value(j);
  }
}

}  // namespace lockstep::ref
