#include <algorithm>
#include <cstring>

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
  const int64_t width = out.nibbles ? 16 : 32;
  const size_t slots = static_cast<size_t>(out.groups * out.blocks * kBlockGroup);
  // Past N: value 0 (nibble 8, int8 0) and scale 0.
  out.data.assign(slots * static_cast<size_t>(width), out.nibbles ? uint8_t{0x88} : uint8_t{0});
  out.scales.assign(slots, 0.0f);
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
        uint8_t* dst = out.data.data() + ((g * out.blocks + b) * kBlockGroup + j) * width;
        out.scales[static_cast<size_t>((g * out.blocks + b) * kBlockGroup + j)] = quant::block_scale(block);
        if (out.nibbles) {
          std::memcpy(dst, block + 2, 16);
        } else {
          quant::block_values(p.type, block, values);
          std::memcpy(dst, values, kBlockValues);
        }
      }
    }
  }
  return out;
}

}  // namespace lockstep::simd
