// The optimizer's passes (AdamW, the EMA, the clipping norm's block sums) against their reference
// twins, with memcmp, for every SIMD target, over sizes around the vector width and the block.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/thread_pool.hpp"
#include "kernels/ref/optimizer.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "support/test_util.hpp"
#include "train/optimizer_pass.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

const int kSizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 64, 65, 1000, 4099};

// Values the update meets: zeros, signed zeros, subnormals (no flush-to-zero) and large ones,
// among random ones.
std::vector<float> with_edges(std::vector<float> v) {
  const float edges[] = {0.0f, -0.0f, std::numeric_limits<float>::denorm_min(), -1e-40f, 3e30f, -7e-20f};
  for (size_t i = 0; i < v.size(); i += 5) v[i] = edges[(i / 5) % 6];
  return v;
}

TEST(OptimizerKernels, AdamWAndEmaEqualReference) {
  uint64_t seed = 1;
  for (const Kernels* k : simd::supported_kernels()) {
    for (int n : kSizes) {
      for (const float grad_scale : {1.0f, 0.37f}) {
        for (const int64_t t : {int64_t{1}, int64_t{2}, int64_t{1000}}) {
          const ref::AdamWScalars s = ref::adamw_scalars(3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
          const auto g = with_edges(test::random_floats(n, seed++, 2.0)), p = test::random_floats(n, seed++);
          const auto m = test::random_floats(n, seed++, 0.1);
          auto v = with_edges(test::random_floats(n, seed++, 0.01));
          for (float& x : v) x = std::fabs(x);
          const size_t sz = static_cast<size_t>(n);
          std::vector<float> p_ref(sz), m_ref(sz), v_ref(sz), p_got(sz), m_got(sz), v_got(sz);
          ref::adamw_update(s, grad_scale, g.data(), p.data(), m.data(), v.data(), p_ref.data(), m_ref.data(),
                            v_ref.data(), n);
          k->adamw_update(s, grad_scale, g.data(), p.data(), m.data(), v.data(), p_got.data(), m_got.data(),
                          v_got.data(), n);
          const std::string what = std::string(k->name) + " n=" + std::to_string(n) + " t=" + std::to_string(t) +
                                   " scale=" + std::to_string(grad_scale);
          EXPECT_TRUE(test::same_bits(p_got, p_ref)) << what << " p";
          EXPECT_TRUE(test::same_bits(m_got, m_ref)) << what << " m";
          EXPECT_TRUE(test::same_bits(v_got, v_ref)) << what << " v";
        }
      }
      for (const double decay : {0.0, 0.5, 0.9990000128746033, 0.18181818181818182}) {
        const auto ema = with_edges(test::random_floats(n, seed++)), p = test::random_floats(n, seed++);
        std::vector<float> want(static_cast<size_t>(n)), got(want.size());
        ref::ema_update(decay, ema.data(), p.data(), want.data(), n);
        k->ema_update(decay, ema.data(), p.data(), got.data(), n);
        EXPECT_TRUE(test::same_bits(got, want)) << k->name << " ema n=" << n << " decay=" << decay;
      }
    }
  }
}

// The clipping norm as the trainer computes it (train::gradient_sum_of_squares): block sums split
// across 1, 2, 3 and 7 workers, then added in block order, equal ref::block_sum_of_squares.
TEST(OptimizerKernels, BlockSumsOfSquaresEqualReferenceOnEverySplit) {
  constexpr int64_t B = ref::kNormBlock;
  ThreadPool pool(7);
  uint64_t seed = 500;
  for (const Kernels* k : simd::supported_kernels()) {
    for (const int64_t n : {int64_t{1}, int64_t{17}, B - 1, B, B + 1, 4 * B, 5 * B + 17, 9 * B - 1, 13 * B}) {
      // Blocks of very different magnitudes, so that adding their sums in another order would
      // round differently.
      auto g = with_edges(test::random_floats(n, seed++, 3.0));
      for (int64_t i = 0; i < n; ++i) g[static_cast<size_t>(i)] *= static_cast<float>(std::pow(37.0, (i / B) % 5 - 2));
      const double want = ref::block_sum_of_squares(g.data(), n);
      for (const int workers : {1, 2, 3, 7}) {
        const double got = train::gradient_sum_of_squares(k, pool, workers, g.data(), n);
        EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want))
            << k->name << " n=" << n << " workers=" << workers;
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
