// GGUF's block formats Q8_0, Q4_0 and Q5_0 (docs/ARITHMETIC.md, "The profile lockstep-int8dot-1"):
// a matrix of K inputs and N outputs is N rows (one per output) of K / 32 blocks, each block 32
// consecutive inputs with an f16 scale. The codec alone: reading a block's scale and its 32
// integers, exactly as the files hold them. The arithmetic on them is kernels/ref's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/half.hpp"

namespace lockstep::quant {

inline constexpr int kBlockValues = 32;  // inputs per block

// ggml's type numbers, so a GGUF tensor's type maps to one by value.
enum class BlockType : uint32_t { q4_0 = 2, q5_0 = 6, q8_0 = 8 };

// "Q8_0", "Q4_0", "Q5_0" (ggml's names).
const char* block_type_name(BlockType type) noexcept;
// The block type of ggml type number `ggml_type`, if it is one of the three.
std::optional<BlockType> block_type_of(uint32_t ggml_type) noexcept;

// Bytes of one block: Q8_0 34 (f16 d, 32 int8), Q4_0 18 (f16 d, 16 bytes of nibbles), Q5_0 22
// (f16 d, u32 of fifth bits, 16 bytes of nibbles).
constexpr int64_t block_bytes(BlockType type) {
  return type == BlockType::q8_0 ? 34 : type == BlockType::q4_0 ? 18 : 22;
}
// Bytes of one row of K inputs (K a multiple of 32).
constexpr int64_t block_row_bytes(BlockType type, int64_t K) { return K / kBlockValues * block_bytes(type); }

// The block's scale, its f16 widened exactly to f32.
inline float block_scale(const uint8_t* block) {
  return f32_from_f16_bits(static_cast<uint16_t>(block[0] | (block[1] << 8)));
}

// The block's 32 integers in input order: Q8_0's int8 as they are; Q4_0's nibble - 8 (element j
// in the low nibble of byte j, element j + 16 in its high nibble); Q5_0's five-bit value - 16
// (the nibbles as Q4_0's, bit 4 of element j being bit j of the little-endian u32 qh).
void block_values(BlockType type, const uint8_t* block, int8_t values[kBlockValues]);

// One matrix as a GGUF file holds it: N rows (one per output) of K inputs in `type`'s blocks.
struct BlockRows {
  BlockType type = BlockType::q8_0;
  int64_t K = 0, N = 0;
  std::span<const uint8_t> rows;  // N * block_row_bytes(type, K) bytes, the file's own
  // What keeps `rows` alive: the mapped weights file of a loaded model (its pages are the file's,
  // given back and read again by the system as it needs), or a copy of the bytes.
  std::shared_ptr<const void> owner;
};
// Rows viewing `bytes`, which `owner` keeps alive; with no owner, rows of a copy of them.
BlockRows block_rows(BlockType type, int64_t K, int64_t N, std::span<const uint8_t> bytes,
                     std::shared_ptr<const void> owner);
// A model's matrices in blocks by registry offset (an int8dot model's: docs/FORMAT.md).
using BlockMatrices = std::unordered_map<int64_t, BlockRows>;

// Every value of `m` dequantized, w = dw * float(q) (one rounded multiply): into out [K, N]
// (lockstep's [in, out] layout, `transpose`) or out [N, K] (the rows as they are: an embedding).
void dequantize_rows(const BlockRows& m, float* out, bool transpose);
// The same values at out[i] for i in [begin, end) alone (indices into the whole layout above):
// what a loader keeps of a matrix whose whole pages it gives back, or restores of them.
void dequantize_range(const BlockRows& m, float* out, bool transpose, int64_t begin, int64_t end);

}  // namespace lockstep::quant
