// A matrix in GGUF blocks (quant/gguf_blocks.hpp) laid out for the integer matmul
// (kernels/simd/matmul_blocks.cpp): outputs in groups of kBlockGroup, each group's blocks in
// input order, the group's kBlockGroup blocks of one input range side by side, so that the
// kernel reads each group as one contiguous stream and puts the group's outputs in the lanes of
// one f32 vector. The integers and scales are the file's, unchanged (Q4_0's nibbles kept as
// nibbles; Q5_0's and a mix of types widened to int8, the same integers).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "quant/gguf_blocks.hpp"

namespace lockstep::simd {

inline constexpr int kBlockGroup = 8;  // outputs per group: the lanes of an AVX2 f32 vector

struct BlockMatrix {
  int64_t K = 0, N = 0;
  int64_t blocks = 0;  // K / 32
  int64_t groups = 0;  // ceil(N / kBlockGroup)
  // Nibbles (every part Q4_0): block (g, b, j) is 16 bytes, value e = (byte[e % 16] >> 4 * (e / 16)
  // & 15) - 8, at nibbles[((g * blocks + b) * kBlockGroup + j) * 16]. Else int8: 32 bytes at
  // values[((g * blocks + b) * kBlockGroup + j) * 32].
  bool nibbles = false;
  std::vector<uint8_t> data;
  std::vector<float> scales;  // [groups][blocks][kBlockGroup], the f16 scales widened; 0 past N
  const uint8_t* block(int64_t g, int64_t b, int j) const {
    return data.data() + ((g * blocks + b) * kBlockGroup + j) * (nibbles ? 16 : 32);
  }
  const float* group_scales(int64_t g, int64_t b) const { return scales.data() + (g * blocks + b) * kBlockGroup; }
};

// One matrix of a concatenation: N rows of block_row_bytes(type, K) bytes, as a GGUF file holds.
struct BlockPart {
  const uint8_t* rows;
  quant::BlockType type;
  int64_t N;
};
// The column-wise concatenation of parts sharing K (a multiple of 32), e.g. [wq | wk | wv].
// Columns past N hold zero weights and zero scales.
BlockMatrix pack_blocks(const BlockPart* parts, int n_parts, int64_t K);

}  // namespace lockstep::simd
