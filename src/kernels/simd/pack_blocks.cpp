#include <algorithm>

#include "kernels/simd/block_matrix.hpp"

namespace lockstep::simd {

using quant::kBlockValues;

BlockMatrix pack_blocks(const BlockPart* parts, int n_parts, int64_t K) {
  BlockMatrix out;
  out.K = K;
  out.blocks = K / kBlockValues;
  out.nibbles = n_parts > 0;
  for (int i = 0; i < n_parts; ++i) {
    out.N += parts[i].N;
    out.nibbles = out.nibbles && parts[i].type == quant::BlockType::q4_0;
  }
  out.groups = (out.N + kBlockGroup - 1) / kBlockGroup;
  const size_t slots = static_cast<size_t>(out.groups * out.blocks);
  // Past N: value 0 (nibble 8, int8 0), scale 0, sum 0.
  out.data.assign(slots * static_cast<size_t>(out.block_bytes()), out.nibbles ? uint8_t{0x88} : uint8_t{0});
  out.scales.assign(slots * kBlockGroup, 0.0f);
  out.sums.assign(slots * kBlockGroup, 0);
  int64_t col = 0;
  int8_t values[kBlockValues];
  for (int i = 0; i < n_parts; ++i) {
    const BlockPart& p = parts[i];
    const int64_t bytes = quant::block_bytes(p.type);
    for (int64_t n = 0; n < p.N; ++n, ++col) {
      const int64_t g = col / kBlockGroup;
      const int j = static_cast<int>(col % kBlockGroup);
      for (int64_t b = 0; b < out.blocks; ++b) {
        const uint8_t* block = p.rows + (n * out.blocks + b) * bytes;
        const size_t slot = static_cast<size_t>((g * out.blocks + b) * kBlockGroup + j);
        out.scales[slot] = quant::block_scale(block);
        quant::block_values(p.type, block, values);
        uint8_t* dst = out.data.data() + (g * out.blocks + b) * out.block_bytes();
        int32_t sum = 0;
        for (int k = 0; k < kBlockValues; ++k) {
          sum += values[k];
          const int v = k / 4, at = j * 4 + k % 4;
          if (!out.nibbles) {
            dst[v * 32 + at] = static_cast<uint8_t>(values[k]);
          } else {
            uint8_t& byte = dst[(v / 2) * 32 + at];
            const auto nibble = static_cast<uint8_t>(values[k] + 8);
            byte = v % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | nibble) : static_cast<uint8_t>((byte & 0x0f) | (nibble << 4));
          }
        }
        out.sums[slot] = sum;
      }
    }
  }
  return out;
}

}  // namespace lockstep::simd
