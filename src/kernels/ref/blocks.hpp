// The profiles lockstep-int8dot-1's and -2's own operations (docs/ARITHMETIC.md, "The profile
// lockstep-int8dot-1", "K-quant matrices in integers"), line by line: activations quantized per block of 32, the matmul by a
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

// The block integer sum of 32 weights and 32 quantized activations (exact in int32), and of 16.
int32_t block_dot(const int8_t* w, const int8_t* qx);
int32_t half_dot(const int8_t* w, const int8_t* qx);

// One block's step of an output's chain (acc in, acc out), by the block's form:
//   scaled (Q8_0, Q4_0, Q5_0):  acc = fma(float(Σ q qx), c1 * dx, acc)
//   halves (Q6_K):              acc = fma(float(Σ_{j<16} q qx), c1 * dx, acc),
//                               acc = fma(float(Σ_{j>=16} q qx), c2 * dx, acc)
//   minus_min (Q4_K, Q5_K):     acc = fma(float(Σ q qx), c1 * dx, acc),
//                               acc = fma(float(Σ qx), c2 * dx, acc)
float block_chain_step(const quant::RowBlock& w, const int8_t* qx, float dx, float acc);

// y [M, N] = x [M, K] @ W, W in GGUF blocks of `type`: N rows of block_row_bytes(type, K) bytes
// (row n: output n's K inputs). Each row of x is quantized (quantize_activations), then each
// y[m, n] is one chain from +0 over the blocks b = 0, 1, ..., K / 32 - 1 (block_chain_step).
void matmul_blocks(const float* x, const uint8_t* w, quant::BlockType type, float* y, int64_t M, int64_t K,
                   int64_t N);

// The same from rows already quantized (qx [M, K], dx [M, K / 32]): what the fast kernels compute.
void matmul_blocks_quantized(const int8_t* qx, const float* dx, const uint8_t* w, quant::BlockType type, float* y,
                             int64_t M, int64_t K, int64_t N);

// The embedding row of one token from its row in blocks (block_row_bytes(type, d) bytes):
// out[32 b + j] = RowBlock::value(j) of block b (Q8_0, Q4_0, Q5_0: dw[b] * float(w), one rounded
// multiply; the K-quants' values as they are widened).
void embed_blocks(const uint8_t* row, quant::BlockType type, int64_t d, float* out);

}  // namespace lockstep::ref
