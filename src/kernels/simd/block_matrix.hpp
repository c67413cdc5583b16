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
// A matrix of K-quants (profile lockstep-int8dot-2; all its parts K-quants) keeps, per group and
// super-block (8 blocks), a header of the 8 outputs' f16 super-scales d1 and d2 and a lane mask
// (int8: -1 for Q4_K and Q5_K, form minus_min; 0 for Q6_K, form halves), then the 8 blocks'
// records: the integers (quant::KQuantBlock's q: Q4_K's as they are in nibbles where every part
// is Q4_K, else int8), then the 8 outputs' int8 scales s1 and s2. The kernels make each
// coefficient c = f32(d) ⊗ s (exact) as the reference does: at 0.59 bytes a weight for Q4_K
// (the file's 0.5625), where f32 coefficients in every record took 1.375.
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
  bool k_quants = false;  // every part a K-quant: super-block headers, int8 scales in each record
  // [groups][blocks] records of int_bytes() integers and kBlockGroup f16 scales (little-endian
  // binary16, the file's bits; 0 past N); for K-quants [groups][blocks / 8] super-records of
  // kKHeaderBytes (d1 [8] f16, d2 [8] f16, mask [8] int8) and 8 records of int_bytes() integers,
  // s1 [8] int8, s2 [8] int8 (all 0 past N).
  std::vector<uint8_t> data;
  static constexpr int64_t kKHeaderBytes = 5 * kBlockGroup;

  int64_t int_bytes() const { return nibbles ? 128 : 256; }
  int64_t record_bytes() const { return int_bytes() + 2 * kBlockGroup; }  // a K-quant's too (its s1, s2)
  int64_t super_record_bytes() const { return kKHeaderBytes + 8 * record_bytes(); }
  // A K-quant matrix's header of block b's super-block.
  const uint8_t* k_header(int64_t g, int64_t b) const { return data.data() + (g * (blocks / 8) + b / 8) * super_record_bytes(); }
  const uint8_t* block(int64_t g, int64_t b) const {
    return k_quants ? k_header(g, b) + kKHeaderBytes + (b % 8) * record_bytes() : data.data() + (g * blocks + b) * record_bytes();
  }
  // The record's 8 f16 scales, for a vector load (widened exactly).
  const uint8_t* scales_at(int64_t g, int64_t b) const { return block(g, b) + int_bytes(); }
  // Output j's scale, widened exactly to f32.
  float scale(int64_t g, int64_t b, int j) const {
    const uint8_t* p = scales_at(g, b) + 2 * j;
    return f32_from_f16_bits(static_cast<uint16_t>(p[0] | (p[1] << 8)));
  }
  // K-quants: output j's coefficients c = f32(d) ⊗ s (exact), and whether its form is minus_min.
  float c1(int64_t g, int64_t b, int j) const { return k_coefficient(k_header(g, b) + 2 * j, block(g, b)[int_bytes() + j]); }
  float c2(int64_t g, int64_t b, int j) const {
    return k_coefficient(k_header(g, b) + 2 * (kBlockGroup + j), block(g, b)[int_bytes() + kBlockGroup + j]);
  }
  bool minus_min(int64_t g, int64_t b, int j) const { return k_header(g, b)[4 * kBlockGroup + j] != 0; }
  // The integer of output j (of group g), input 32 b + k.
  int value(int64_t g, int64_t b, int j, int k) const {
    const int v = k / 4, i = j * 4 + k % 4;
    const uint8_t* p = block(g, b);
    if (!nibbles) return static_cast<int8_t>(p[v * 32 + i]);
    const uint8_t byte = p[(v / 2) * 32 + i];
    return (v % 2 == 0 ? byte & 15 : byte >> 4) - (k_quants ? 0 : 8);  // Q4_K's nibbles have no offset
  }

 private:
  static float k_coefficient(const uint8_t* d, uint8_t s) {
    return f32_from_f16_bits(static_cast<uint16_t>(d[0] | (d[1] << 8))) * static_cast<float>(static_cast<int8_t>(s));
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
