// A matrix in GGUF blocks (quant/gguf_blocks.hpp) laid out for the integer matmul
// (kernels/simd/matmul_blocks.cpp): outputs in groups of kBlockGroup, each group's blocks in
// input order, and inside a block the group's 8 x 32 integers interleaved by quads of inputs:
// vector v (32 bytes) holds inputs 4v .. 4v + 3 of output 0, then of output 1, ..., so that one
// broadcast quad of activations meets all 8 outputs and each int32 lane of a dot product is one
// output's sum (no horizontal sums). The integers and scales are the file's, unchanged: Q4_0's
// stay 4-bit (value + 8 as a nibble: vector 2c's in the low nibbles of chunk c, vector 2c + 1's in
// the high ones); Q5_0's, Q8_0's and a fused mix of types are int8. Each (group, block) is one
// record: the integers, then the 8 outputs' f16 scales as the file has them, so that decoding
// streams a group as one run of memory, at the file's bytes per weight.
// A matrix of K-quants (profile lockstep-int8dot-2; all its parts K-quants) keeps int8 integers
// (quant::RowBlock's q) and, after them, the 8 outputs' coefficients c1 and c2 (f32, exact
// products made when packing) and a lane mask, all ones for Q4_K and Q5_K (form minus_min) and
// zero for Q6_K (form halves).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/half.hpp"
#include "quant/gguf_blocks.hpp"

namespace lockstep::simd {

inline constexpr int kBlockGroup = 8;  // outputs per group: the lanes of an AVX2 f32 vector

struct BlockMatrix {
  int64_t K = 0, N = 0;
  int64_t blocks = 0;  // K / 32
  int64_t groups = 0;  // ceil(N / kBlockGroup)
  bool nibbles = false;  // every part Q4_0: 128 bytes of integers a (group, block); else int8, 256
  bool k_quants = false;  // every part a K-quant: the coefficients and mask after the integers
  // [groups][blocks] records of int_bytes() integers and kBlockGroup f16 scales (little-endian
  // binary16, the file's bits; 0 past N), or for K-quants the coefficients: c1 [8] f32, c2 [8]
  // f32, mask [8] int32 (0 past N).
  std::vector<uint8_t> data;

  int64_t int_bytes() const { return nibbles ? 128 : 256; }
  int64_t record_bytes() const { return int_bytes() + (k_quants ? 12 * kBlockGroup : 2 * kBlockGroup); }
  const uint8_t* block(int64_t g, int64_t b) const { return data.data() + (g * blocks + b) * record_bytes(); }
  // The record's 8 f16 scales, for a vector load (widened exactly).
  const uint8_t* scales_at(int64_t g, int64_t b) const { return block(g, b) + int_bytes(); }
  // Output j's scale, widened exactly to f32.
  float scale(int64_t g, int64_t b, int j) const {
    const uint8_t* p = scales_at(g, b) + 2 * j;
    return f32_from_f16_bits(static_cast<uint16_t>(p[0] | (p[1] << 8)));
  }
  // K-quants: output j's coefficients and whether its form is minus_min.
  const float* c1_at(int64_t g, int64_t b) const { return reinterpret_cast<const float*>(block(g, b) + int_bytes()); }
  const float* c2_at(int64_t g, int64_t b) const { return c1_at(g, b) + kBlockGroup; }
  const int32_t* mask_at(int64_t g, int64_t b) const {
    return reinterpret_cast<const int32_t*>(block(g, b) + int_bytes() + 8 * kBlockGroup);
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
// The column-wise concatenation of parts sharing K (a multiple of 32; of 256 for K-quants), e.g.
// [wq | wk | wv]: all K-quants, or none (the caller refuses a mix). Columns past N hold zero
// weights and zero scales (coefficients).
BlockMatrix pack_blocks(const BlockPart* parts, int n_parts, int64_t K);

}  // namespace lockstep::simd
