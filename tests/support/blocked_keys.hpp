// Keys and values in the fast path's blocked layouts (kernels/simd/kernels.hpp,
// simd::kKeysPerBlock) from the reference's rows, for the attention kernels' memcmp tests and
// benchmarks' inputs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/simd/kernels.hpp"

namespace lockstep::test {

// Keys rows [n][stride] (key j's d-th value at keys[j * stride + d]) as dimensions
// [first, first + hd) of a cache of `dim` dimensions in blocks: [key_blocks(n)][dim][16], key j's
// d-th value at (j / 16) * dim * 16 + (first + d) * 16 + j % 16. Every other float (the other
// dimensions, and the last block's lanes past n) holds fill[d] for the head's dimensions where
// fill is given, else `other`. The head's keys for the kernels start at first * 16, blocks
// key_block_stride(dim) apart.
inline std::vector<float> blocked_keys(const float* keys, int64_t stride, int64_t n, int32_t hd, int64_t dim,
                                       int64_t first, float other, std::span<const float> fill = {}) {
  constexpr int64_t B = simd::kKeysPerBlock;
  const int64_t bs = simd::key_block_stride(dim);
  std::vector<float> out(static_cast<size_t>(simd::key_blocks(n) * bs), other);
  for (int64_t b = 0; b < simd::key_blocks(n); ++b)
    for (int32_t d = 0; d < hd; ++d)
      for (int64_t lane = 0; lane < B; ++lane) {
        const int64_t j = b * B + lane;
        float& at = out[static_cast<size_t>(b * bs + (first + d) * B + lane)];
        if (j < n) at = keys[j * stride + d];
        else if (!fill.empty()) at = fill[static_cast<size_t>(d)];
      }
  return out;
}

// Value rows [n][stride] as head `head` (its rows of hd floats) of a cache of `dim` dimensions in
// blocks: [key_blocks(n)][dim / hd][16][hd], value j's d-th at (j / 16) * dim * 16 + head * hd *
// 16 + (j % 16) * hd + d (simd::value_row). Every other float holds `other`. The head's values for
// the kernels start at head * hd * 16, rows hd apart within a block, blocks key_block_stride(dim)
// apart.
inline std::vector<float> blocked_values(const float* values, int64_t stride, int64_t n, int32_t hd, int64_t dim,
                                         int64_t head, float other) {
  const int64_t bs = simd::key_block_stride(dim);
  std::vector<float> out(static_cast<size_t>(simd::key_blocks(n) * bs), other);
  for (int64_t j = 0; j < n; ++j)
    for (int32_t d = 0; d < hd; ++d)
      out[static_cast<size_t>(head * hd * simd::kKeysPerBlock + simd::value_row(j, hd, bs) + d)] =
          values[j * stride + d];
  return out;
}

}  // namespace lockstep::test
