// A matrix in GGUF blocks (quant/gguf_blocks.hpp) laid out for the integer matmul
// (kernels/simd/matmul_blocks.cpp): outputs in groups of kBlockGroup, each group's blocks in
// input order, and inside a block the group's 8 x 32 integers interleaved by quads of inputs:
// vector v (32 bytes) holds inputs 4v .. 4v + 3 of output 0, then of output 1, ..., so that one
// broadcast quad of activations meets all 8 outputs and each int32 lane of a dot product is one
// output's sum (no horizontal sums). The integers and scales are the file's, unchanged: Q4_0's
// stay 4-bit (value + 8 as a nibble: vector 2c's in the low nibbles of chunk c, vector 2c + 1's in
// the high ones); Q5_0's, Q8_0's and a fused mix of types are int8. Each (group, block) is one
// record: the integers, then the 8 outputs' scales (f32), then their integer sums (int32), so that
// decoding streams a group as one run of memory.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "quant/gguf_blocks.hpp"

namespace lockstep::simd {

inline constexpr int kBlockGroup = 8;  // outputs per group: the lanes of an AVX2 f32 vector

struct BlockMatrix {
  int64_t K = 0, N = 0;
  int64_t blocks = 0;  // K / 32
  int64_t groups = 0;  // ceil(N / kBlockGroup)
  bool nibbles = false;  // every part Q4_0: 128 bytes of integers a (group, block); else int8, 256
  // [groups][blocks] records of int_bytes() integers, kBlockGroup f32 scales (the f16 scales
  // widened; 0 past N) and kBlockGroup int32 sums (each output's sum of the block's 32 integers,
  // exact: for kernels that offset the activations to unsigned bytes, VNNI's u8 x s8 product).
  std::vector<uint8_t> data;

  int64_t int_bytes() const { return nibbles ? 128 : 256; }
  int64_t record_bytes() const { return int_bytes() + 2 * kBlockGroup * 4; }
  const uint8_t* block(int64_t g, int64_t b) const { return data.data() + (g * blocks + b) * record_bytes(); }
  // The record's scales and sums, for vector loads (8 each).
  const uint8_t* scales_at(int64_t g, int64_t b) const { return block(g, b) + int_bytes(); }
  const uint8_t* sums_at(int64_t g, int64_t b) const { return scales_at(g, b) + kBlockGroup * 4; }
  float scale(int64_t g, int64_t b, int j) const {
    float s;
    std::memcpy(&s, scales_at(g, b) + 4 * j, 4);
    return s;
  }
  int32_t sum(int64_t g, int64_t b, int j) const {
    int32_t s;
    std::memcpy(&s, sums_at(g, b) + 4 * j, 4);
    return s;
  }
  // The integer of output j (of group g), input 32 b + k.
  int value(int64_t g, int64_t b, int j, int k) const {
    const int v = k / 4, i = j * 4 + k % 4;
    const uint8_t* p = block(g, b);
    if (!nibbles) return static_cast<int8_t>(p[v * 32 + i]);
    const uint8_t byte = p[(v / 2) * 32 + i];
    return (v % 2 == 0 ? byte & 15 : byte >> 4) - 8;
  }
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
