#include "quant/gguf_blocks.hpp"

#include <algorithm>
#include <cmath>

namespace lockstep::quant {

const char* block_type_name(BlockType type) noexcept {
  switch (type) {
    case BlockType::q8_0: return "Q8_0";
    case BlockType::q4_0: return "Q4_0";
    case BlockType::q5_0: return "Q5_0";
    case BlockType::q4_k: return "Q4_K";
    case BlockType::q5_k: return "Q5_K";
    case BlockType::q6_k: return "Q6_K";
  }
  return "?";
}

std::optional<BlockType> block_type_of(uint32_t ggml_type, bool k_quants) noexcept {
  for (BlockType t : {BlockType::q4_0, BlockType::q5_0, BlockType::q8_0, BlockType::q4_k, BlockType::q5_k, BlockType::q6_k})
    if (static_cast<uint32_t>(t) == ggml_type && (k_quants || !is_k_quant(t))) return t;
  return std::nullopt;
}

void row_block(BlockType type, const uint8_t* row, int64_t b, RowBlock& out) {
  if (!is_k_quant(type)) {
    const uint8_t* block = row + b * block_bytes(type);
    block_values(type, block, out.q);
    out.c1 = block_scale(block);
    out.c2 = 0.0f;
    out.form = RowBlock::Form::scaled;
    return;
  }
  const auto k = static_cast<KQuantType>(type);
  KQuantBlock kb;
  k_quant_block(k, row + b / 8 * super_block_bytes(k), static_cast<int>(b % 8), kb);
  std::copy(kb.q, kb.q + kBlockValues, out.q);
  out.c1 = kb.c1();
  out.c2 = kb.c2();
  out.form = kb.halves ? RowBlock::Form::halves : RowBlock::Form::minus_min;
}

bool unit_scales_finite(BlockType type, const uint8_t* row, int64_t u) {
  auto finite = [](const uint8_t* p) { return std::isfinite(f32_from_f16_bits(static_cast<uint16_t>(p[0] | (p[1] << 8)))); };
  if (!is_k_quant(type)) return finite(row + u * block_bytes(type));
  const auto k = static_cast<KQuantType>(type);
  const uint8_t* sb = row + u * super_block_bytes(k);
  return k == KQuantType::q6_k ? finite(sb + 208) : finite(sb) && finite(sb + 2);
}

void block_values(BlockType type, const uint8_t* block, int8_t values[kBlockValues]) {
  const uint8_t* q = block + 2;
  switch (type) {
    case BlockType::q8_0:
      for (int j = 0; j < kBlockValues; ++j) values[j] = static_cast<int8_t>(q[j]);
      return;
    case BlockType::q4_0:
      for (int j = 0; j < 16; ++j) {
        values[j] = static_cast<int8_t>((q[j] & 15) - 8);
        values[j + 16] = static_cast<int8_t>((q[j] >> 4) - 8);
      }
      return;
    case BlockType::q5_0: {
      const uint32_t qh = static_cast<uint32_t>(q[0]) | (static_cast<uint32_t>(q[1]) << 8) |
                          (static_cast<uint32_t>(q[2]) << 16) | (static_cast<uint32_t>(q[3]) << 24);
      const uint8_t* qs = q + 4;
      for (int j = 0; j < 16; ++j) {
        values[j] = static_cast<int8_t>(((qs[j] & 15) | (((qh >> j) & 1u) << 4)) - 16);
        values[j + 16] = static_cast<int8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16);
      }
      return;
    }
    case BlockType::q4_k:
    case BlockType::q5_k:
    case BlockType::q6_k: return;  // super-blocks: row_block decodes them
  }
}

BlockRows block_rows(BlockType type, int64_t K, int64_t N, std::span<const uint8_t> bytes,
                     std::shared_ptr<const void> owner) {
  if (!owner) {
    auto copy = std::make_shared<const std::vector<uint8_t>>(bytes.begin(), bytes.end());
    bytes = *copy;
    owner = std::move(copy);
  }
  return {type, K, N, bytes, std::move(owner)};
}

void dequantize_range(const BlockRows& m, float* out, bool transpose, int64_t begin, int64_t end) {
  if (begin >= end) return;
  const int64_t row_bytes = block_row_bytes(m.type, m.K), blocks = m.K / kBlockValues;
  // Block b of output n holds inputs [32 b, 32 b + 32): decoded once, its values in the range written.
  auto put = [&](int64_t n, int64_t b) {
    RowBlock block;
    row_block(m.type, m.rows.data() + n * row_bytes, b, block);
    for (int j = 0; j < kBlockValues; ++j) {
      const int64_t k = b * kBlockValues + j, i = transpose ? k * m.N + n : n * m.K + k;
      if (i >= begin && i < end) out[i] = block.value(j);
    }
  };
  if (transpose) {  // out[k N + n]: every output's block b for each b whose inputs the range touches
    for (int64_t b = begin / m.N / kBlockValues; b <= (end - 1) / m.N / kBlockValues; ++b)
      for (int64_t n = 0; n < m.N; ++n) put(n, b);
  } else {  // out[n K + k]: block i / 32 holds element i (K is a multiple of 32)
    for (int64_t a = begin / kBlockValues; a <= (end - 1) / kBlockValues; ++a) put(a / blocks, a % blocks);
  }
}

bool has_k_quants(const BlockMatrices& blocks) noexcept {
  return std::any_of(blocks.begin(), blocks.end(), [](const auto& b) { return is_k_quant(b.second.type); });
}

void dequantize_rows(const BlockRows& m, float* out, bool transpose) {
  dequantize_range(m, out, transpose, 0, m.K * m.N);
}

}  // namespace lockstep::quant
