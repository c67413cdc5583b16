// The one-row matmul (decoding) over any range of panels: the kernel sweeps the full panels of
// its range in wide tiles of P, P / 2, ... 1 panels, then a last partial panel; whatever the
// range (as a thread's share cuts it), every output equals ref::matmul over the weights the
// storage holds (f32, bf16 halves, q8, q4), with memcmp, on every target this machine runs.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "quant/q4.hpp"
#include "quant/q8.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

struct Stored {
  simd::PackedMatrix packed;
  std::vector<float> weights;  // [K, N], the values the kernel must compute with
};

// w [K, N] stored as `storage` (0 f32, 1 bf16, 2 q8, 3 q4) for k.
Stored store(const simd::Kernels& k, int storage, int64_t K, int64_t N, uint64_t seed) {
  std::vector<float> w = test::random_floats(K * N, seed);
  Stored out;
  out.weights.resize(w.size());
  if (storage == 2) {
    std::vector<int8_t> q(w.size());
    std::vector<float> scale(static_cast<size_t>(N));
    quant::pack_q8(w.data(), K, N, q.data(), scale.data());
    quant::expand_q8(q.data(), scale.data(), K, N, out.weights.data());
    const simd::Q8Part part{q.data(), scale.data(), N};
    out.packed = simd::pack_q8_concat(k, &part, 1, K);
  } else if (storage == 3) {
    std::vector<uint8_t> packed(static_cast<size_t>(K * quant::q4_row_bytes(N)));
    std::vector<float> scale(static_cast<size_t>(quant::q4_groups(K) * N));
    quant::pack_q4(w.data(), K, N, packed.data(), scale.data());
    quant::expand_q4(packed.data(), scale.data(), K, N, out.weights.data());
    const simd::Q4Part part{packed.data(), scale.data(), N};
    out.packed = simd::pack_q4_concat(k, &part, 1, K);
  } else {
    for (size_t i = 0; i < w.size(); ++i) out.weights[i] = storage == 1 ? ref::round_bf16(w[i]) : w[i];
    out.packed = simd::pack_matrix(k, w.data(), K, N, N, storage == 1);
  }
  return out;
}

TEST(DecodeMatmul, EveryPanelRangeEqualsReference) {
  const char* const names[] = {"f32", "bf16", "q8", "q4"};
  uint64_t seed = 91000;
  for (const simd::Kernels* k : simd::supported_kernels()) {
    EXPECT_GE(k->decode_panels, 1) << k->name;
    // 15 full panels (8 + 4 + 2 + 1 on AVX-512; 3 x 5 on AVX2) and a partial one.
    const int64_t N = 15 * int64_t{k->panel_width} + 5;
    for (int storage = 0; storage < 4; ++storage) {
      for (int64_t K : {1, 33, 300}) {
        const Stored w = store(*k, storage, K, N, seed++);
        const auto a = test::random_floats(K, seed++);
        std::vector<float> want(static_cast<size_t>(N));
        ref::matmul(a.data(), w.weights.data(), want.data(), 1, K, N);
        const int64_t panels = w.packed.panels;
        for (int64_t p0 : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{7}}) {
          for (int64_t p1 = p0 + 1; p1 <= panels; ++p1) {
            std::vector<float> got(static_cast<size_t>(N), -1.0f);
            k->matmul(a.data(), K, 1, w.packed, p0, p1, got.data(), N);
            const int64_t c0 = p0 * k->panel_width, c1 = std::min(N, p1 * k->panel_width);
            const std::string what = std::string(k->name) + " " + names[storage] + " K=" + std::to_string(K) +
                                     " panels [" + std::to_string(p0) + ", " + std::to_string(p1) + ")";
            ASSERT_EQ(std::memcmp(got.data() + c0, want.data() + c0, static_cast<size_t>(c1 - c0) * sizeof(float)), 0)
                << what;
            for (int64_t j = 0; j < N; ++j) {
              if (j < c0 || j >= c1) {
                ASSERT_EQ(got[static_cast<size_t>(j)], -1.0f) << what << ": wrote column " << j;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
