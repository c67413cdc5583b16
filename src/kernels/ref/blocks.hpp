// The profile lockstep-int8dot-1's own operations (docs/ARITHMETIC.md, "The profile
// lockstep-int8dot-1"), line by line: activations quantized per block of 32, the matmul by a
// matrix in GGUF blocks as integer block sums and one f32 chain over the blocks, and the
// embedding lookup of a row in blocks. The fast kernels (kernels/simd/matmul_blocks.cpp) quantize
// with quantize_activations itself and have matmul_blocks as their twin.
#pragma once

#include <cstdint>

#include "quant/gguf_blocks.hpp"

namespace lockstep::ref {

// One row x [K] (K a multiple of 32) quantized block by block: qx [K] in [-127, 127] and
// dx [K / 32]. Per block b: amax = max |x| over its 32 values (from +0); dx[b] = amax / 127;
// dx[b] == 0: the block's qx are 0; else qx = clamp(round_half_even(x / dx[b]), -127, 127).
void quantize_activations(const float* x, int64_t K, int8_t* qx, float* dx);

// The block integer sum of 32 weights and 32 quantized activations (exact in int32).
int32_t block_dot(const int8_t* w, const int8_t* qx);

// y [M, N] = x [M, K] @ W, W in GGUF blocks of `type`: N rows of block_row_bytes(type, K) bytes
// (row n: output n's K inputs). Each row of x is quantized (quantize_activations), then each
// y[m, n] is one chain over b = 0, 1, ..., K / 32 - 1 from +0:
//   s = dw[n, b] * dx[m, b]; acc = fma(float(isum[n, b]), s, acc).
void matmul_blocks(const float* x, const uint8_t* w, quant::BlockType type, float* y, int64_t M, int64_t K,
                   int64_t N);

// The same from rows already quantized (qx [M, K], dx [M, K / 32]): what the fast kernels compute.
void matmul_blocks_quantized(const int8_t* qx, const float* dx, const uint8_t* w, quant::BlockType type, float* y,
                             int64_t M, int64_t K, int64_t N);

// The embedding row of one token from its row in blocks (block_row_bytes(type, d) bytes):
// out[32 b + j] = dw[b] * float(w[32 b + j]), one rounded multiply each.
void embed_blocks(const uint8_t* row, quant::BlockType type, int64_t d, float* out);

}  // namespace lockstep::ref
