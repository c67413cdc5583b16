// GGUF's block formats Q8_0, Q4_0 and Q5_0 (docs/ARITHMETIC.md, "The profile lockstep-int8dot-1"),
// and the K-quants Q4_K, Q5_K and Q6_K (quant/k_quants.hpp; "K-quant matrices in integers"): a
// matrix of K inputs and N outputs is N rows (one per output); a row is K / 32 blocks of 32
// consecutive inputs with an f16 scale, or K / 256 K-quant super-blocks of 8 such blocks under
// shared scales. The codec alone: reading a block's integers and scales exactly as the files
// hold them. The arithmetic on them is kernels/ref's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/half.hpp"
#include "quant/k_quants.hpp"

namespace lockstep::quant {

inline constexpr int kBlockValues = 32;  // inputs per block

// ggml's type numbers, so a GGUF tensor's type maps to one by value.
enum class BlockType : uint32_t { q4_0 = 2, q5_0 = 6, q8_0 = 8, q4_k = 12, q5_k = 13, q6_k = 14 };

// "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K" (ggml's names).
const char* block_type_name(BlockType type) noexcept;
// The block type of ggml type number `ggml_type`, if it is one of the six (the K-quants only when
// `k_quants`: a model of profile lockstep-int8dot-1 widens them to f32 instead).
std::optional<BlockType> block_type_of(uint32_t ggml_type, bool k_quants) noexcept;
// Q4_K, Q5_K or Q6_K.
constexpr bool is_k_quant(BlockType type) { return static_cast<uint32_t>(type) >= 12; }
// Inputs a row's length must be a multiple of: 32, or 256 for a K-quant.
constexpr int64_t row_multiple(BlockType type) { return is_k_quant(type) ? kSuperBlockValues : kBlockValues; }

// Bytes of one block (Q8_0, Q4_0, Q5_0): Q8_0 34 (f16 d, 32 int8), Q4_0 18 (f16 d, 16 bytes of
// nibbles), Q5_0 22 (f16 d, u32 of fifth bits, 16 bytes of nibbles).
constexpr int64_t block_bytes(BlockType type) {
  return type == BlockType::q8_0 ? 34 : type == BlockType::q4_0 ? 18 : 22;
}
// Bytes of one row of K inputs (K a multiple of row_multiple(type)).
constexpr int64_t block_row_bytes(BlockType type, int64_t K) {
  return is_k_quant(type) ? K / kSuperBlockValues * super_block_bytes(static_cast<KQuantType>(type))
                          : K / kBlockValues * block_bytes(type);
}

// The block's scale, its f16 widened exactly to f32.
inline float block_scale(const uint8_t* block) {
  return f32_from_f16_bits(static_cast<uint16_t>(block[0] | (block[1] << 8)));
}

// The block's 32 integers in input order: Q8_0's int8 as they are; Q4_0's nibble - 8 (element j
// in the low nibble of byte j, element j + 16 in its high nibble); Q5_0's five-bit value - 16
// (the nibbles as Q4_0's, bit 4 of element j being bit j of the little-endian u32 qh).
void block_values(BlockType type, const uint8_t* block, int8_t values[kBlockValues]);

// Block b (inputs 32 b .. 32 b + 31) of a row of `type`, as the profile computes it: its 32
// integers and coefficients. Q8_0, Q4_0, Q5_0: block_values and c1 = the block's scale (c2 0);
// the K-quants: k_quant_block's. The value of input j is value(j).
struct RowBlock {
  enum class Form { scaled, halves, minus_min };  // c1 ⊗ q; (c1 or c2) ⊗ q; c1 ⊗ q ⊕ c2
  int8_t q[kBlockValues];
  float c1 = 0.0f, c2 = 0.0f;
  Form form = Form::scaled;
  float value(int j) const {
    const float v = static_cast<float>(q[j]);
    return form == Form::scaled ? c1 * v : form == Form::halves ? (j < 16 ? c1 : c2) * v : c1 * v + c2;
  }
};
void row_block(BlockType type, const uint8_t* row, int64_t b, RowBlock& out);

// The f16 scales of the block or super-block unit u of a row (Q8_0/Q4_0/Q5_0: block u; K-quants:
// super-block u) are finite; units per row: K / row_multiple(type).
bool unit_scales_finite(BlockType type, const uint8_t* row, int64_t u);

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
// Whether any of them is a K-quant (the model's profile is then lockstep-int8dot-2).
bool has_k_quants(const BlockMatrices& blocks) noexcept;

// Every value of `m` dequantized (RowBlock::value: Q8_0, Q4_0, Q5_0 w = dw * float(q), one rounded
// multiply; the K-quants as k_quants.hpp widens them): into out [K, N]
// (lockstep's [in, out] layout, `transpose`) or out [N, K] (the rows as they are: an embedding).
void dequantize_rows(const BlockRows& m, float* out, bool transpose);
// The same values at out[i] for i in [begin, end) alone (indices into the whole layout above):
// what a loader keeps of a matrix whose whole pages it gives back, or restores of them.
void dequantize_range(const BlockRows& m, float* out, bool transpose, int64_t begin, int64_t end);

}  // namespace lockstep::quant
