// The matmul (docs/ARITHMETIC.md, "matmul"): C [M, N] = A [M, K] @ B [K, N], each C[m, n] one fma
// chain in increasing k from +0. A classic tiled kernel: a block owns a kTileM x kTileN tile of C
// and each of its threads owns kThreadM x kThreadN outputs of it, keeping their accumulators for
// the whole k loop. k runs in tiles of kTileK: every thread copies its part of the A and B tiles
// into shared memory (phase `load`), a barrier, every thread advances its chains by the tile's
// k values in order (phase `step`), a barrier. No split-K, no atomics, no tensor cores: a chain
// never leaves its thread, so its order is the reference's whatever the grid. A chain takes
// exactly K steps (a short last tile stops at K: an fma with 0 would turn a -0 into +0).
//
// The epilogue, per output, after the chain: v = acc; with `bias`, v = v + bias[n] (the bias
// after the chain, never its start); with `accumulate`, C = C + v (the residual add), else C = v.
// `round_a` rounds A's values to bf16 as they enter (precision bf16; B is rounded at upload).
#pragma once

#include "kernels/cuda/arith.hpp"

namespace lockstep::cuda {

struct MatmulArgs {
  const float* a;  // [M, K], rows lda apart
  const float* b;  // [K, N], rows ldb apart
  float* c;        // [M, N], rows ldc apart
  const float* bias;  // [N] or null
  int64_t M, K, N;
  int64_t lda, ldb, ldc;
  bool accumulate;
  bool round_a;
};

inline constexpr int32_t kTileM = 128, kTileN = 128, kTileK = 8;
inline constexpr int32_t kThreadM = 8, kThreadN = 8;
inline constexpr int32_t kMatmulThreadsX = kTileN / kThreadN;  // 16
inline constexpr int32_t kMatmulThreads = (kTileM / kThreadM) * kMatmulThreadsX;  // 256
static_assert(kTileM * kTileK % kMatmulThreads == 0 && kTileK * kTileN % kMatmulThreads == 0);

// Blocks: x along N, y along M.
inline int64_t matmul_blocks_x(const MatmulArgs& a) { return (a.N + kTileN - 1) / kTileN; }
inline int64_t matmul_blocks_y(const MatmulArgs& a) { return (a.M + kTileM - 1) / kTileM; }
LOCKSTEP_HD inline int64_t matmul_k_tiles(const MatmulArgs& a) { return (a.K + kTileK - 1) / kTileK; }

struct MatmulShared {
  float a[kTileK][kTileM];  // A's tile, transposed: a[kk][i] = A[m0 + i, k0 + kk]
  float b[kTileK][kTileN];  // b[kk][j] = B[k0 + kk, n0 + j]
};

// One thread's outputs: rows m0 + ty + 16 i, columns n0 + tx + 16 j (strided, so that a warp's
// reads of the shared tiles and its stores of C are along consecutive columns).
struct MatmulAccumulators {
  float v[kThreadM][kThreadN];
};

LOCKSTEP_HD inline void matmul_begin(MatmulAccumulators& acc) {
  for (int32_t i = 0; i < kThreadM; ++i)
    for (int32_t j = 0; j < kThreadN; ++j) acc.v[i][j] = 0.0f;
}

// Phase `load` of k tile `kt`: this thread's share of both tiles (0 past the matrix's edges;
// a 0 past K is never used, see matmul_step).
LOCKSTEP_HD inline void matmul_load(const MatmulArgs& a, ThreadAt at, int64_t kt, MatmulShared& s) {
  const int64_t m0 = static_cast<int64_t>(at.block_y) * kTileM, n0 = at.block_x * kTileN, k0 = kt * kTileK;
  for (int32_t e = at.thread; e < kTileM * kTileK; e += kMatmulThreads) {
    const int32_t i = e / kTileK, kk = e % kTileK;
    const int64_t m = m0 + i, k = k0 + kk;
    float v = 0.0f;
    if (m < a.M && k < a.K) {
      v = a.a[m * a.lda + k];
      if (a.round_a) v = round_bf16(v);
    }
    s.a[kk][i] = v;
  }
  for (int32_t e = at.thread; e < kTileK * kTileN; e += kMatmulThreads) {
    const int32_t kk = e / kTileN, j = e % kTileN;
    const int64_t n = n0 + j, k = k0 + kk;
    s.b[kk][j] = (n < a.N && k < a.K) ? a.b[k * a.ldb + n] : 0.0f;
  }
}

// Phase `step` of k tile `kt`: each owned chain takes the tile's k values in increasing k.
LOCKSTEP_HD inline void matmul_step(const MatmulArgs& a, ThreadAt at, int64_t kt, const MatmulShared& s,
                                    MatmulAccumulators& acc) {
  const int32_t tx = at.thread % kMatmulThreadsX, ty = at.thread / kMatmulThreadsX;
  const int64_t left = a.K - kt * kTileK;
  const int32_t k_end = left < kTileK ? static_cast<int32_t>(left) : kTileK;
  for (int32_t kk = 0; kk < k_end; ++kk) {
    float av[kThreadM], bv[kThreadN];
    for (int32_t i = 0; i < kThreadM; ++i) av[i] = s.a[kk][ty + i * (kTileM / kThreadM)];
    for (int32_t j = 0; j < kThreadN; ++j) bv[j] = s.b[kk][tx + j * kMatmulThreadsX];
    for (int32_t i = 0; i < kThreadM; ++i)
      for (int32_t j = 0; j < kThreadN; ++j) acc.v[i][j] = fma_rn(av[i], bv[j], acc.v[i][j]);
  }
}

// The epilogue: each owned output inside C.
LOCKSTEP_HD inline void matmul_store(const MatmulArgs& a, ThreadAt at, const MatmulAccumulators& acc) {
  const int32_t tx = at.thread % kMatmulThreadsX, ty = at.thread / kMatmulThreadsX;
  const int64_t m0 = static_cast<int64_t>(at.block_y) * kTileM, n0 = at.block_x * kTileN;
  for (int32_t i = 0; i < kThreadM; ++i) {
    const int64_t m = m0 + ty + i * (kTileM / kThreadM);
    if (m >= a.M) continue;
    for (int32_t j = 0; j < kThreadN; ++j) {
      const int64_t n = n0 + tx + j * kMatmulThreadsX;
      if (n >= a.N) continue;
      float v = acc.v[i][j];
      if (a.bias) v = add_rn(v, a.bias[n]);
      float* out = a.c + m * a.ldc + n;
      *out = a.accumulate ? add_rn(*out, v) : v;
    }
  }
}

}  // namespace lockstep::cuda
