// The CUDA kernels' bodies run on the host (kernels/cuda/host_launch.hpp: every block, every
// phase for every thread in turn) against the reference kernels, by memcmp, over shapes of 1,
// primes and sizes around the tile widths. These run on every machine, GPU or not: the device
// runs the same functions (docs/CUDA.md).
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <limits>

#include "kernels/cuda/host_launch.hpp"
#include "kernels/ref/ops.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using cuda::HostLaunch;

std::vector<float> floats(int64_t n, uint64_t seed, double scale = 1.0) { return test::random_floats(n, seed, scale); }

TEST(CudaHostKernels, ExpIsTheReferenceExp) {
  // Every 97th f32 bit pattern (both signs, NaN, infinities, subnormals among them) and the edges.
  std::vector<float> xs = {0.0f, -0.0f, 88.7f, 89.0f, 89.0001f, -103.9f, -104.0f, -104.001f, -87.3f,
                           std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  for (uint64_t u = 0; u <= 0xffffffffu; u += 97) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(u)));
  size_t differing = 0;
  for (float x : xs) {
    const float got = cuda::exp_f32(x), want = ref::exp_f32(x);
    if (std::bit_cast<uint32_t>(got) != std::bit_cast<uint32_t>(want) && !(got != got && want != want)) ++differing;
  }
  EXPECT_EQ(differing, 0u) << "of " << xs.size();
}

TEST(CudaHostKernels, RoundBf16IsTheReference) {
  for (uint64_t u = 0; u <= 0xffffffffu; u += 31) {
    const float x = std::bit_cast<float>(static_cast<uint32_t>(u));
    ASSERT_EQ(std::bit_cast<uint32_t>(cuda::round_bf16(x)), std::bit_cast<uint32_t>(ref::round_bf16(x))) << u;
  }
}

// The reference of one MatmulArgs: the chain (bf16 operands when round_a, B already rounded),
// then the bias, then the residual add.
std::vector<float> reference_matmul(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& c0,
                                    const float* bias, int64_t M, int64_t K, int64_t N, int64_t lda, int64_t ldc,
                                    bool accumulate, bool round_a) {
  std::vector<float> dense_a(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N)), c = c0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) dense_a[static_cast<size_t>(m * K + k)] = a[static_cast<size_t>(m * lda + k)];
  if (round_a) {
    ref::matmul_bf16(dense_a.data(), b.data(), y.data(), M, K, N);  // b holds bf16 values: unchanged by rounding
  } else {
    ref::matmul(dense_a.data(), b.data(), y.data(), M, K, N);
  }
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float v = y[static_cast<size_t>(m * N + n)];
      if (bias) v = v + bias[n];
      float& out = c[static_cast<size_t>(m * ldc + n)];
      out = accumulate ? out + v : v;
    }
  }
  return c;
}

TEST(CudaHostKernels, MatmulEqualsReferenceForEveryShape) {
  // M and N around the 128-wide tiles, K around the 8-deep k tiles, with 1 and primes.
  const int64_t Ms[] = {1, 2, 7, 127, 128, 129};
  const int64_t Ks[] = {1, 7, 8, 9, 16, 31, 67};
  const int64_t Ns[] = {1, 5, 127, 128, 129, 257};
  uint64_t seed = 1;
  int checked = 0;
  for (int64_t M : Ms) {
    for (int64_t K : Ks) {
      for (int64_t N : Ns) {
        if (M * N > 129 * 129 && K > 16) continue;  // the largest shapes at the shorter depths only
        // Variants by shape: plain; bias + residual add; bf16 A; padded strides.
        const int variant = static_cast<int>(seed % 4);
        const bool accumulate = variant == 1, round_a = variant == 2;
        const int64_t lda = variant == 3 ? K + 3 : K, ldc = variant == 3 ? N + 2 : N;
        std::vector<float> a = floats(M * lda, seed * 3), b = floats(K * N, seed * 3 + 1),
                           c0 = floats(M * ldc, seed * 3 + 2), bias = floats(N, seed * 7);
        if (round_a)
          for (float& v : b) v = ref::round_bf16(v);
        if (M > 1) std::fill_n(a.begin() + lda, K, -0.0f);  // a row of -0: its chains stay +0
        std::vector<float> c = c0;
        const float* bias_ptr = variant == 1 ? bias.data() : nullptr;
        HostLaunch launch;
        launch.matmul(cuda::MatmulArgs{a.data(), b.data(), c.data(), bias_ptr, M, K, N, lda, N, ldc, accumulate, round_a});
        const std::vector<float> want = reference_matmul(a, b, c0, bias_ptr, M, K, N, lda, ldc, accumulate, round_a);
        ASSERT_TRUE(test::same_bits(c, want)) << "M " << M << " K " << K << " N " << N << " variant " << variant;
        ++seed;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 150);
}

TEST(CudaHostKernels, RmsNormEqualsReference) {
  for (int32_t n : {1, 2, 7, 127, 128, 129, 768}) {
    const int64_t rows = 5;
    const std::vector<float> x = floats(rows * n, static_cast<uint64_t>(n)), w = floats(n, 1000u + n);
    const std::vector<int32_t> gather = {4, 0, 2};
    for (bool gathered : {false, true}) {
      const int64_t out_rows = gathered ? 3 : rows;
      std::vector<float> y(static_cast<size_t>(out_rows * n)), want(y.size());
      HostLaunch launch;
      launch.rmsnorm(cuda::RmsNormArgs{x.data(), gathered ? gather.data() : nullptr, w.data(), y.data(), out_rows, n, n, 1e-5f});
      for (int64_t r = 0; r < out_rows; ++r) {
        const int64_t src = gathered ? gather[static_cast<size_t>(r)] : r;
        ref::rmsnorm(x.data() + src * n, w.data(), want.data() + r * n, n, 1e-5f);
      }
      ASSERT_TRUE(test::same_bits(y, want)) << "n " << n << (gathered ? " gathered" : "");
    }
  }
}

TEST(CudaHostKernels, RopeEqualsReference) {
  struct Shape {
    int32_t heads, kv_heads, head_dim;
  };
  for (const Shape s : {Shape{1, 1, 2}, Shape{4, 2, 8}, Shape{3, 1, 34}, Shape{12, 12, 64}}) {
    const int32_t length = 37, half = s.head_dim / 2;
    const int64_t q = int64_t{s.heads} * s.head_dim, kv = int64_t{s.kv_heads} * s.head_dim, width = q + 2 * kv;
    std::vector<float> cos(static_cast<size_t>(length * half)), sin(cos.size());
    ref::rope_tables(length, s.head_dim, 10000.0f, cos.data(), sin.data());
    const int64_t rows = 41;
    std::vector<int32_t> pos(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) pos[static_cast<size_t>(r)] = static_cast<int32_t>((r * 11) % length);
    std::vector<float> qkv = floats(rows * width, static_cast<uint64_t>(width)), want = qkv;
    HostLaunch launch;
    launch.rope(cuda::RopeArgs{qkv.data(), pos.data(), cos.data(), sin.data(), rows, width, s.heads, s.kv_heads, s.head_dim});
    for (int64_t r = 0; r < rows; ++r) {
      const float* c = cos.data() + pos[static_cast<size_t>(r)] * half;
      const float* sn = sin.data() + pos[static_cast<size_t>(r)] * half;
      ref::rope(want.data() + r * width, s.heads, s.head_dim, c, sn);
      ref::rope(want.data() + r * width + q, s.kv_heads, s.head_dim, c, sn);
    }
    ASSERT_TRUE(test::same_bits(qkv, want)) << s.heads << " heads, " << s.kv_heads << " kv heads, head_dim " << s.head_dim;
  }
}

TEST(CudaHostKernels, AttentionEqualsReferenceOverRaggedSequences) {
  struct Shape {
    int32_t heads, kv_heads, head_dim;
  };
  // Sequences of 1, primes and lengths around the 128 threads of a block, one after another as
  // the forward pass flattens them; launches of every row at once and of 7 rows at a time.
  const std::vector<int32_t> lengths = {1, 2, 5, 127, 128, 129, 131};
  for (const Shape s : {Shape{1, 1, 1}, Shape{4, 2, 8}, Shape{2, 1, 33}, Shape{3, 3, 64}}) {
    const int64_t q = int64_t{s.heads} * s.head_dim, kv = int64_t{s.kv_heads} * s.head_dim, width = q + 2 * kv;
    std::vector<int32_t> pos;
    for (int32_t n : lengths)
      for (int32_t t = 0; t < n; ++t) pos.push_back(t);
    const int64_t rows = static_cast<int64_t>(pos.size()), longest = 131;
    const std::vector<float> qkv = floats(rows * width, static_cast<uint64_t>(width) * 5, 2.0);
    const float scale = ref::attention_scale<float>(s.head_dim);
    std::vector<float> want(static_cast<size_t>(rows * q)), scratch(static_cast<size_t>(longest));
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = pos[static_cast<size_t>(r)], first = r - t;
      for (int32_t h = 0; h < s.heads; ++h) {
        const int64_t kvh = h / (s.heads / s.kv_heads);
        ref::attention(qkv.data() + r * width + h * s.head_dim, qkv.data() + first * width + q + kvh * s.head_dim,
                       qkv.data() + first * width + q + kv + kvh * s.head_dim, width, t + 1, s.head_dim, scale,
                       want.data() + r * q + h * s.head_dim, scratch.data());
      }
    }
    for (int64_t chunk : {rows, int64_t{7}}) {
      std::vector<float> out(want.size(), 0.0f), scores(static_cast<size_t>(chunk * s.heads * longest));
      HostLaunch launch;
      for (int64_t row0 = 0; row0 < rows; row0 += chunk)
        launch.attention(cuda::AttentionArgs{qkv.data(), pos.data(), out.data(), scores.data(), std::min(chunk, rows - row0),
                                             row0, width, longest, s.heads, s.kv_heads, s.head_dim, scale});
      ASSERT_TRUE(test::same_bits(out, want)) << s.heads << " heads, " << s.kv_heads << " kv heads, head_dim "
                                              << s.head_dim << ", " << chunk << " rows a launch";
    }
  }
}

TEST(CudaHostKernels, SwigluEqualsReference) {
  for (int32_t ff : {1, 3, 255, 256, 257}) {
    const int64_t rows = 3;
    std::vector<float> gate_up = floats(rows * 2 * ff, static_cast<uint64_t>(ff) + 77, 4.0);
    gate_up[0] = -200.0f;  // exp(-g) = inf: silu = -0
    if (ff > 1) gate_up[1] = 200.0f;
    std::vector<float> h(static_cast<size_t>(rows * ff)), want(h.size());
    HostLaunch launch;
    launch.swiglu(cuda::SwigluArgs{gate_up.data(), h.data(), rows, ff});
    for (int64_t r = 0; r < rows; ++r)
      ref::swiglu(gate_up.data() + r * 2 * ff, gate_up.data() + r * 2 * ff + ff, want.data() + r * ff, ff);
    ASSERT_TRUE(test::same_bits(h, want)) << "ff " << ff;
  }
}

TEST(CudaHostKernels, EmbedGathersRows) {
  const int32_t d = 37, vocab = 11;
  const std::vector<float> embed = floats(int64_t{vocab} * d, 5);
  const std::vector<int32_t> ids = {3, 0, 10, 3, 7};
  std::vector<float> x(ids.size() * d);
  HostLaunch launch;
  launch.embed(cuda::EmbedArgs{ids.data(), embed.data(), x.data(), static_cast<int64_t>(ids.size()), d});
  for (size_t r = 0; r < ids.size(); ++r)
    ASSERT_EQ(std::memcmp(x.data() + r * d, embed.data() + ids[r] * d, d * sizeof(float)), 0) << r;
}

}  // namespace
}  // namespace lockstep
