// How the workers of a parallel region share one matmul: every output goes to exactly one worker,
// which runs its whole chain, so the split never changes a bit.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/thread_pool.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep::simd {

struct MatmulShare {
  int64_t row_begin, row_end, panel_begin, panel_end;
};

// Splits the panels when that balances at least as well as splitting the rows (in whole row
// blocks), else the rows; with prefer_rows, the other way round (matmul_at_part says when).
inline MatmulShare matmul_share(int64_t M, const PackedMatrix& b, int row_block, int w, int n,
                                bool prefer_rows = false) {
  const int64_t blocks = (M + row_block - 1) / row_block;
  auto imbalance = [n](int64_t items) {
    const int64_t most = (items + n - 1) / n;
    return static_cast<double>(most * n) / static_cast<double>(std::max<int64_t>(items, 1));
  };
  const double by_panels = imbalance(b.panels), by_rows = imbalance(blocks);
  if (n == 1 || (prefer_rows ? by_panels < by_rows : by_panels <= by_rows)) {
    const auto [p0, p1] = static_range(b.panels, w, n);
    return {0, M, p0, p1};
  }
  const auto [b0, b1] = static_range(blocks, w, n);
  return {b0 * row_block, std::min(M, b1 * row_block), 0, b.panels};
}

// Worker w of n's share of c [M, N] = a [M, K] @ b.
inline void matmul_part(const Kernels& k, const float* a, int64_t lda, int64_t M, const PackedMatrix& b,
                        float* c, int64_t ldc, int w, int n) {
  const MatmulShare s = matmul_share(M, b, k.row_block, w, n);
  if (s.row_begin < s.row_end && s.panel_begin < s.panel_end)
    k.matmul(a + s.row_begin * lda, lda, s.row_end - s.row_begin, b, s.panel_begin, s.panel_end,
             c + s.row_begin * ldc, ldc);
}

// Worker w of n's share of c [M, N] = a^T @ b, a [K, M] (row stride lda); scratch holds
// k.matmul_at_scratch_floats(M) floats of this worker's own. When both split evenly, rows if
// M >= N (each worker reads all of b and packs only its columns of a), panels if b is the
// wider (each worker reads its part of b and packs all of a): a worker reads K (N + M / n)
// against K (M + N / n) floats. Training's gate/up and q/k/v gradients (M 256, N 1536 and 768)
// split by panels measured 1.03-1.07x faster per 2-thread step (16 interleaved pairs).
// With `accumulate`, the chains continue from c's values (Kernels::matmul_at_continue).
inline void matmul_at_part(const Kernels& k, const float* a, int64_t lda, int64_t M, const PackedMatrix& b,
                           float* c, int64_t ldc, float* scratch, int w, int n, bool accumulate = false) {
  const MatmulShare s = matmul_share(M, b, k.row_block, w, n, M >= b.N);
  if (s.row_begin < s.row_end && s.panel_begin < s.panel_end)
    (accumulate ? k.matmul_at_continue : k.matmul_at)(a + s.row_begin, lda, s.row_end - s.row_begin, b, s.panel_begin, s.panel_end,
                c + s.row_begin * ldc, ldc, scratch);
}

}  // namespace lockstep::simd
