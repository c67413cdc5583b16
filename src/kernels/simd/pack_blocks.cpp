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
  const size_t slots = static_cast<size_t>(out.groups * out.blocks);
  // Past N: value 0 (nibble 8, int8 0), scale 0, sum 0.
  out.data.assign(slots * static_cast<size_t>(out.record_bytes()), uint8_t{0});
  if (out.nibbles)
    for (size_t s = 0; s < slots; ++s)
      std::fill_n(out.data.begin() + static_cast<std::ptrdiff_t>(s) * out.record_bytes(), out.int_bytes(), uint8_t{0x88});
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
        uint8_t* dst = out.data.data() + (g * out.blocks + b) * out.record_bytes();
        std::memcpy(dst + out.int_bytes() + 2 * j, block, 2);  // the f16 scale's bits
        quant::block_values(p.type, block, values);
        for (int k = 0; k < kBlockValues; ++k) {
          const int v = k / 4, at = j * 4 + k % 4;
          if (!out.nibbles) {
            dst[v * 32 + at] = static_cast<uint8_t>(values[k]);
          } else {
            uint8_t& byte = dst[(v / 2) * 32 + at];
            const auto nibble = static_cast<uint8_t>(values[k] + 8);
            byte = v % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | nibble) : static_cast<uint8_t>((byte & 0x0f) | (nibble << 4));
          }
        }
      }
    }
  }
  return out;
}

}  // namespace lockstep::simd
