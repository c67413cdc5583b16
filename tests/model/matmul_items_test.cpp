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

TEST(MatmulItems, CoverEveryOutputOnceAndCutDecodeInWholeWideTiles) {
  for (const simd::Kernels* k : simd::supported_kernels()) {
    for (int64_t M : {1, 2, 9, 300}) {
      for (int64_t N : {1, 100, 1024, 3072, 5632}) {
        for (int n : {1, 2, 3, 7}) {
          simd::PackedMatrix b;  // the shape alone: items never read the weights
          b.K = 1024;
          b.N = N;
          b.panel = k->panel_width;
          b.panels = (N + b.panel - 1) / b.panel;
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

}  // namespace
}  // namespace lockstep
