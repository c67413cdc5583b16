// How the fast forward pass cuts a matmul phase into items (model/matmul_items.hpp): every output
// in exactly one item, and a one-row matmul (a decode step) in whole units of the kernel's
// decode_panels, so that each thread's share runs in the kernel's wide tiles.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/simd/dispatch.hpp"
#include "model/matmul_items.hpp"

namespace lockstep {
namespace {

// A packed matrix's shape alone: items never read the weights.
simd::PackedMatrix shape_of(const simd::Kernels& k, int64_t K, int64_t N) {
  simd::PackedMatrix b;
  b.K = K;
  b.N = N;
  b.panel = k.panel_width;
  b.panels = (N + b.panel - 1) / b.panel;
  return b;
}

TEST(MatmulItems, CoverEveryOutputOnceAndCutDecodeInWholeWideTiles) {
  for (const simd::Kernels* k : simd::supported_kernels()) {
    for (int64_t M : {1, 2, 9, 129, 300}) {
      for (int64_t N : {1, 100, 1024, 3072, 5632}) {
        for (int n : {1, 2, 3, 7}) {
          const simd::PackedMatrix b = shape_of(*k, 1024, N);
          const MatmulItems s = matmul_items(M, b, *k, n);
          const std::string what = std::string(k->name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                   " threads=" + std::to_string(n);
          ASSERT_GE(s.count(), 1) << what;
          std::vector<int> seen(static_cast<size_t>(b.panels * M), 0);
          for (int64_t i = 0; i < s.count(); ++i) {
            const auto [panels, rows] = matmul_item_range(M, b, s, i);
            if (M == 1) {
              EXPECT_EQ(panels.first % k->decode_panels, 0) << what << " item " << i;
              EXPECT_TRUE(panels.second % k->decode_panels == 0 || panels.second == b.panels) << what << " item " << i;
            }
            for (int64_t p = panels.first; p < panels.second; ++p)
              for (int64_t r = rows.first; r < rows.second; ++r) ++seen[static_cast<size_t>(p * M + r)];
          }
          for (size_t j = 0; j < seen.size(); ++j) ASSERT_EQ(seen[j], 1) << what << " output block " << j;
          if (n > 1 && M == 1 && N >= 3072) {
            EXPECT_GE(s.count(), n) << what << ": every thread gets a share";
          }
        }
      }
    }
  }
}

// From kRowsPerThreadForRowGroups rows a thread (a prefill), thread s's share of the items
// (ThreadPool::run_phases hands thread s the s-th of n contiguous runs first) is exactly the s-th
// row group: the same rows (static_range over the row blocks) that its share of a per-token phase
// covers, so its A and C stay in its own core's caches from phase to phase.
TEST(MatmulItems, PrefillSharesAreWholeRowGroups) {
  for (const simd::Kernels* k : simd::supported_kernels()) {
    for (int n : {2, 3, 7}) {
      for (int64_t M : {kRowsPerThreadForRowGroups * n, int64_t{256}, int64_t{1000}}) {
        if (M < kRowsPerThreadForRowGroups * n) continue;
        for (int64_t N : {32, 256, 2304}) {
          const simd::PackedMatrix b = shape_of(*k, 768, N);
          const MatmulItems s = matmul_items(M, b, *k, n);
          const std::string what = std::string(k->name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                                   " threads=" + std::to_string(n);
          ASSERT_EQ(s.row_groups, n) << what;
          for (int t = 0; t < n; ++t) {
            const auto [first, end] = static_range(s.count(), t, n);
            const auto [b0, b1] = static_range(s.row_blocks, t, n);
            const int64_t r0 = b0 * s.row_block, r1 = std::min(M, b1 * s.row_block);
            for (int64_t i = first; i < end; ++i) {
              const auto [panels, rows] = matmul_item_range(M, b, s, i);
              EXPECT_EQ(rows.first, r0) << what << " thread " << t << " item " << i;
              EXPECT_EQ(rows.second, r1) << what << " thread " << t << " item " << i;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
