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
  out.k_quants = n_parts > 0;
  for (int i = 0; i < n_parts; ++i) {
    out.N += parts[i].N;
    out.nibbles = out.nibbles && parts[i].type == quant::BlockType::q4_0;
    out.k_quants = out.k_quants && quant::is_k_quant(parts[i].type);
  }
  out.groups = (out.N + kBlockGroup - 1) / kBlockGroup;
  const size_t slots = static_cast<size_t>(out.groups * out.blocks);
  // Past N: value 0 (nibble 8, int8 0), scale 0, coefficients 0, sum 0.
  out.data.assign(slots * static_cast<size_t>(out.record_bytes()), uint8_t{0});
  if (out.nibbles)
    for (size_t s = 0; s < slots; ++s)
      std::fill_n(out.data.begin() + static_cast<std::ptrdiff_t>(s) * out.record_bytes(), out.int_bytes(), uint8_t{0x88});
  int64_t col = 0;
  quant::RowBlock block;
  for (int i = 0; i < n_parts; ++i) {
    const BlockPart& p = parts[i];
    const int64_t row_bytes = quant::block_row_bytes(p.type, K);
    for (int64_t n = 0; n < p.N; ++n, ++col) {
      const int64_t g = col / kBlockGroup;
      const int j = static_cast<int>(col % kBlockGroup);
      for (int64_t b = 0; b < out.blocks; ++b) {
        const uint8_t* row = p.rows + n * row_bytes;
        uint8_t* dst = out.data.data() + (g * out.blocks + b) * out.record_bytes();
        quant::row_block(p.type, row, b, block);
        if (out.k_quants) {
          const int32_t mask = block.form == quant::RowBlock::Form::minus_min ? -1 : 0;
          std::memcpy(dst + out.int_bytes() + 4 * j, &block.c1, 4);
          std::memcpy(dst + out.int_bytes() + 4 * (kBlockGroup + j), &block.c2, 4);
          std::memcpy(dst + out.int_bytes() + 4 * (2 * kBlockGroup + j), &mask, 4);
        } else {
          std::memcpy(dst + out.int_bytes() + 2 * j, row + b * quant::block_bytes(p.type), 2);  // the f16 scale's bits
        }
        for (int k = 0; k < kBlockValues; ++k) {
          const int v = k / 4, at = j * 4 + k % 4;
          if (!out.nibbles) {
            dst[v * 32 + at] = static_cast<uint8_t>(block.q[k]);
          } else {
            uint8_t& byte = dst[(v / 2) * 32 + at];
            const auto nibble = static_cast<uint8_t>(block.q[k] + 8);
            byte = v % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | nibble) : static_cast<uint8_t>((byte & 0x0f) | (nibble << 4));
          }
        }
      }
    }
  }
  return out;
}

}  // namespace lockstep::simd
