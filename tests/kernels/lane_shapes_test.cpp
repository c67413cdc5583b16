// The matmul against ref::matmul, with memcmp, at shapes placed around each target's own panel
// width (a whole number of its vectors) rather than at fixed sizes: SVE's vectors are 128 to 2048
// bits, and at 2048 bits a panel is 128 columns, wider than every N of the fixed sweeps, so
// those never reach a full panel (the full tile, the wide decode tiles) there. Here, for panel
// width P: N from 1 to past kWidePanels full panels (the decode tiles sweep up to 8 at once),
// M across the row tiles (8 rows on Arm, 3 on AVX2) and their remainders, K across the depth
// blocks of 256 (and the q4 groups of 32), for f32, bf16-stored, q8 and q4 weights. This is the
// sweep the Arm stage runs at each SVE length (README, "Running on Arm"); x86 runs it too.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

using test::expect_same;

// Column counts for panel width P: a partial first panel, one full panel and its neighbours, a
// full panel and a partial one, and 9 full panels and a partial one (one group of 8 wide panels,
// then the single-panel rest).
std::vector<int> columns_for(int P) { return {1, P - 1, P, P + 1, 2 * P + 3, 9 * P + 1}; }

// The expansion of w as stored: q8 (a scale per column) or q4 (a scale per 32 rows per column).
enum class Storage { f32, bf16, q8, q4 };
const char* storage_name(Storage s) {
  switch (s) {
    case Storage::f32: return "f32";
    case Storage::bf16: return "bf16";
    case Storage::q8: return "q8";
    default: return "q4";
  }
}

void check(const Kernels& k, Storage storage, int M, int K, int N, uint64_t seed) {
  auto w = test::random_floats(int64_t{K} * N, seed);
  const auto a = test::random_floats(int64_t{M} * K, seed + 1);
  std::vector<int8_t> q8;
  std::vector<uint8_t> q4;
  std::vector<float> scale;
  simd::PackedMatrix packed;
  if (storage == Storage::q8) {
    q8.resize(w.size());
    scale.resize(static_cast<size_t>(N));
    quant::pack_q8(w.data(), K, N, q8.data(), scale.data());
    quant::expand_q8(q8.data(), scale.data(), K, N, w.data());
    const simd::Q8Part part{q8.data(), scale.data(), N};
    packed = simd::pack_q8_concat(k, &part, 1, K);
  } else if (storage == Storage::q4) {
    q4.resize(static_cast<size_t>(K * quant::q4_row_bytes(N)));
    scale.resize(static_cast<size_t>(quant::q4_groups(K) * N));
    quant::pack_q4(w.data(), K, N, q4.data(), scale.data());
    quant::expand_q4(q4.data(), scale.data(), K, N, w.data());
    const simd::Q4Part part{q4.data(), scale.data(), N};
    packed = simd::pack_q4_concat(k, &part, 1, K);
  } else {
    if (storage == Storage::bf16) k.round_bf16(w.data(), w.data(), static_cast<int64_t>(w.size()));
    packed = simd::pack_matrix(k, w.data(), K, N, N, storage == Storage::bf16);
  }
  std::vector<float> want(static_cast<size_t>(M) * N);
  ref::matmul(a.data(), w.data(), want.data(), M, K, N);
  std::vector<float> got(want.size(), -1.0f);
  k.matmul(a.data(), K, M, packed, 0, packed.panels, got.data(), N);
  expect_same(got, want,
              std::string(k.name) + " " + storage_name(storage) + " matmul M=" + std::to_string(M) +
                  " K=" + std::to_string(K) + " N=" + std::to_string(N) + " (panel " +
                  std::to_string(k.panel_width) + ")");
}

TEST(LaneShapes, MatmulEqualsReferenceAroundEachTargetsPanelWidth) {
  uint64_t seed = 71000;
  for (const Kernels* k : simd::supported_kernels()) {
    if (!test::target_under_test(k->name)) continue;  // LOCKSTEP_TEST_TARGETS (test_util.hpp)
    std::printf("lane shapes: %s, %d-column panels\n", k->name, k->panel_width);
    for (Storage storage : {Storage::f32, Storage::bf16, Storage::q8, Storage::q4}) {
      for (int N : columns_for(k->panel_width)) {
        for (int M : {1, 2, 3, 9, 17}) {
          if (N > 2 * k->panel_width + 3 && M != 1 && M != 3) continue;  // the many panels: decode and one tile
          for (int K : {1, 33, 257}) {
            check(*k, storage, M, K, N, seed);
            seed += 2;
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
