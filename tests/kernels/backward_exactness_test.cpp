// The training kernels against their reference twins, with memcmp, for every SIMD target, over
// shapes around the vector width.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

const int kSizes[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 40, 64, 65, 100};

::testing::AssertionResult same(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * 4) == 0)
    return ::testing::AssertionSuccess();
  for (size_t i = 0; i < got.size(); ++i)
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]))
      return ::testing::AssertionFailure() << "first difference at " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionFailure() << "sizes differ";
}

TEST(BackwardKernels, RmsNormEqualsReference) {
  uint64_t seed = 1;
  for (const Kernels* k : simd::supported_kernels()) {
    for (int n : kSizes) {
      for (int R : {1, 3, 4, 10}) {
        const auto x = test::random_floats(R * n, seed++, 2.0), w = test::random_floats(n, seed++), dy = test::random_floats(R * n, seed++);
        std::vector<float> dx_ref(static_cast<size_t>(R * n)), dw_ref(static_cast<size_t>(n));
        ref::rmsnorm_backward(x.data(), w.data(), dy.data(), dx_ref.data(), dw_ref.data(), R, n, 1e-5f);
        std::vector<float> dx(dx_ref.size()), dw(dw_ref.size()), inv(static_cast<size_t>(R));
        std::vector<float> y(dx.size()), y_ref(dx.size());
        for (int r = 0; r < R; ++r) ref::rmsnorm(x.data() + r * n, w.data(), y_ref.data() + r * n, n, 1e-5f);
        // The forward's rows and inverse rms, in pieces of 1 and 5 rows (the kernel interleaves 4).
        for (int r0 = 0, piece = 1; r0 < R; r0 += piece, piece = piece == 1 ? 5 : 1) {
          const int rows = std::min(piece, R - r0);
          k->rmsnorm_rows(x.data() + r0 * n, w.data(), y.data() + r0 * n, inv.data() + r0, rows, n, 1e-5f);
        }
        EXPECT_TRUE(same(y, y_ref)) << k->name << " rmsnorm_rows n=" << n << " R=" << R;
        k->rmsnorm_backward_rows(x.data(), w.data(), dy.data(), inv.data(), dx.data(), R, n);
        for (int i0 = 0; i0 < n; i0 += 13) k->rmsnorm_backward_weight(x.data(), inv.data(), dy.data(), dw.data(), R, n, i0, std::min(n, i0 + 13));
        EXPECT_TRUE(same(dx, dx_ref)) << k->name << " rmsnorm dx n=" << n << " R=" << R;
        EXPECT_TRUE(same(dw, dw_ref)) << k->name << " rmsnorm dw n=" << n << " R=" << R;
      }
    }
  }
}

TEST(BackwardKernels, RopeSwigluAndCrossEntropyEqualReference) {
  uint64_t seed = 100;
  for (const Kernels* k : simd::supported_kernels()) {
    for (int hd : {2, 4, 6, 8, 10, 16, 18, 32, 34, 64}) {
      std::vector<float> c(static_cast<size_t>(5 * hd / 2)), s(c.size());
      ref::rope_tables<float>(5, hd, 10000.0f, c.data(), s.data());
      auto want = test::random_floats(3 * hd, seed++);
      auto got = want;
      ref::rope_backward(want.data(), 3, hd, c.data() + 4 * hd / 2, s.data() + 4 * hd / 2);
      k->rope_backward(got.data(), 3, hd, c.data() + 4 * hd / 2, s.data() + 4 * hd / 2);
      EXPECT_TRUE(same(got, want)) << k->name << " rope_backward hd=" << hd;
    }
    for (int n : kSizes) {
      const auto g = test::random_floats(n, seed++, 5.0), u = test::random_floats(n, seed++), dh = test::random_floats(n, seed++);
      std::vector<float> dg_ref(static_cast<size_t>(n)), du_ref(dg_ref.size()), dg(dg_ref.size()), du(dg_ref.size());
      ref::swiglu_backward(g.data(), u.data(), dh.data(), dg_ref.data(), du_ref.data(), n);
      k->swiglu_backward(g.data(), u.data(), dh.data(), dg.data(), du.data(), n);
      EXPECT_TRUE(same(dg, dg_ref)) << k->name << " swiglu dgate n=" << n;
      EXPECT_TRUE(same(du, du_ref)) << k->name << " swiglu dup n=" << n;
    }
    for (int V : {1, 2, 7, 8, 9, 37, 256, 257}) {
      const auto z = test::random_floats(V, seed++, 3.0);
      for (int target : {0, V - 1}) {
        std::vector<float> want(static_cast<size_t>(V)), got(want.size());
        ref::cross_entropy_backward(z.data(), V, target, 7.0f, want.data());
        const float loss = k->cross_entropy_backward(z.data(), V, target, 7.0f, got.data());
        EXPECT_TRUE(same(got, want)) << k->name << " cross_entropy_backward V=" << V;
        EXPECT_EQ(std::bit_cast<uint32_t>(loss), std::bit_cast<uint32_t>(ref::cross_entropy(z.data(), V, target)));
      }
    }
  }
}

TEST(BackwardKernels, AttentionEqualsReference) {
  uint64_t seed = 500;
  for (const Kernels* k : simd::supported_kernels()) {
    for (int T : {1, 2, 5, 8, 9, 17, 23, 24, 25, 33, 49, 70, 130}) {
      for (int hd : {2, 6, 8, 16, 20, 32, 48, 64}) {
        for (int group : {1, 3}) {
          // Contiguous rows for even T (training's per-head-group layout), strided for odd T; the
          // gradients in a layout of their own.
          const int64_t q_stride = group * hd + (T % 2 ? 2 : 0), kv_stride = hd + (T % 2);
          const int64_t dout_stride = group * hd + 1, dq_stride = group * hd + 3, dkv_stride = hd + 2;
          const auto q = test::random_floats(T * q_stride, seed++), kk = test::random_floats(T * kv_stride, seed++);
          const auto v = test::random_floats(T * kv_stride, seed++), dout = test::random_floats(T * dout_stride, seed++);
          const float scale = ref::attention_scale<float>(hd);
          std::vector<float> scratch(static_cast<size_t>(2 * group * T * T));
          std::vector<float> fast_scratch(static_cast<size_t>(k->attention_backward_scratch(T, group, hd)));
          std::vector<float> dq_ref(static_cast<size_t>(T * dq_stride), 0.0f), dk_ref(static_cast<size_t>(T * dkv_stride), 0.0f);
          std::vector<float> dv_ref(dk_ref.size(), 0.0f);
          ref::attention_backward(q.data(), q_stride, kk.data(), v.data(), kv_stride, dout.data(), dout_stride, dq_ref.data(),
                                  dq_stride, dk_ref.data(), dv_ref.data(), dkv_stride, T, group, hd, scale, scratch.data());
          std::vector<float> dq(dq_ref.size(), 0.0f), dk(dk_ref.size(), 0.0f), dv(dv_ref.size(), 0.0f);
          k->attention_backward(q.data(), q_stride, kk.data(), v.data(), kv_stride, dout.data(), dout_stride, dq.data(),
                                dq_stride, dk.data(), dv.data(), dkv_stride, T, group, hd, scale, fast_scratch.data());
          const std::string what = std::string(k->name) + " T=" + std::to_string(T) + " hd=" + std::to_string(hd) +
                                   " group=" + std::to_string(group);
          EXPECT_TRUE(same(dq, dq_ref)) << what << " dq";
          EXPECT_TRUE(same(dk, dk_ref)) << what << " dk";
          EXPECT_TRUE(same(dv, dv_ref)) << what << " dv";
        }
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
