#include <algorithm>
#include <cstring>

#include "kernels/simd/block_matrix.hpp"

namespace lockstep::simd {

using quant::kBlockValues;

namespace {

// Writes integer k (0-31) of output j into the block's record `dst`: int8, or a nibble (Q4_0's
// value + 8, Q4_K's value as it is).
void put_value(const BlockMatrix& out, uint8_t* dst, int j, int k, int value) {
  const int v = k / 4, at = j * 4 + k % 4;
  if (!out.nibbles) {
    dst[v * 32 + at] = static_cast<uint8_t>(value);
    return;
  }
  uint8_t& byte = dst[(v / 2) * 32 + at];
  const auto nibble = static_cast<uint8_t>(value + (out.k_quants ? 0 : 8));
  byte = v % 2 == 0 ? static_cast<uint8_t>((byte & 0xf0) | nibble) : static_cast<uint8_t>((byte & 0x0f) | (nibble << 4));
}

}  // namespace

BlockMatrix pack_blocks(const BlockPart* parts, int n_parts, int64_t K) {
  BlockMatrix out;
  out.K = K;
  out.blocks = K / kBlockValues;
  bool all_q4_0 = n_parts > 0, all_q4_k = n_parts > 0;
  out.k_quants = n_parts > 0;
  for (int i = 0; i < n_parts; ++i) {
    out.N += parts[i].N;
    all_q4_0 = all_q4_0 && parts[i].type == quant::BlockType::q4_0;
    all_q4_k = all_q4_k && parts[i].type == quant::BlockType::q4_k;
    out.k_quants = out.k_quants && quant::is_k_quant(parts[i].type);
  }
  out.nibbles = all_q4_0 || all_q4_k;
  out.groups = (out.N + kBlockGroup - 1) / kBlockGroup;
  // Past N: value 0 (Q4_0's nibble 8, else 0), scale 0, coefficients 0, sum 0.
  const size_t bytes = static_cast<size_t>(out.k_quants ? out.groups * (out.blocks / 8) * out.super_record_bytes()
                                                        : out.groups * out.blocks * out.record_bytes());
  out.data.assign(bytes, uint8_t{0});
  if (all_q4_0)
    for (int64_t s = 0; s < out.groups * out.blocks; ++s)
      std::fill_n(out.data.begin() + static_cast<std::ptrdiff_t>(s * out.record_bytes()), out.int_bytes(), uint8_t{0x88});
  auto at = [&](int64_t g, int64_t b) { return const_cast<uint8_t*>(out.block(g, b)); };
  int64_t col = 0;
  quant::RowBlock block;
  quant::KQuantBlock kb;
  for (int i = 0; i < n_parts; ++i) {
    const BlockPart& p = parts[i];
    const int64_t row_bytes = quant::block_row_bytes(p.type, K);
    for (int64_t n = 0; n < p.N; ++n, ++col) {
      const int64_t g = col / kBlockGroup;
      const int j = static_cast<int>(col % kBlockGroup);
      const uint8_t* row = p.rows + n * row_bytes;
      for (int64_t b = 0; b < out.blocks; ++b) {
        uint8_t* dst = at(g, b);
        if (out.k_quants) {
          const auto k = static_cast<quant::KQuantType>(p.type);
          quant::k_quant_block(k, row + b / 8 * quant::super_block_bytes(k), static_cast<int>(b % 8), kb);
          uint8_t* header = const_cast<uint8_t*>(out.k_header(g, b));
          std::memcpy(header + 2 * j, &kb.d1, 2);  // little-endian f16 bits, as the file's
          std::memcpy(header + 2 * (kBlockGroup + j), &kb.d2, 2);
          header[4 * kBlockGroup + j] = kb.halves ? 0 : 0xff;
          dst[out.int_bytes() + j] = static_cast<uint8_t>(kb.s1);
          dst[out.int_bytes() + kBlockGroup + j] = static_cast<uint8_t>(kb.s2);
          for (int k2 = 0; k2 < kBlockValues; ++k2) put_value(out, dst, j, k2, kb.q[k2]);
          continue;
        }
        quant::row_block(p.type, row, b, block);
        std::memcpy(dst + out.int_bytes() + 2 * j, row + b * quant::block_bytes(p.type), 2);  // the f16 scale's bits
        for (int k2 = 0; k2 < kBlockValues; ++k2) put_value(out, dst, j, k2, block.q[k2]);
      }
    }
  }
  return out;
}

}  // namespace lockstep::simd
