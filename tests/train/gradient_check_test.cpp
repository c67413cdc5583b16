// Gradient checks in float64: every backward formula of the reference (the same templates the f32
// profile instantiates) against central finite differences of its forward, per op and for the
// whole model.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.hpp"
#include "kernels/ref/ops.hpp"
#include "support/test_util.hpp"
#include "train/reference_step.hpp"

namespace lockstep {
namespace {

std::vector<double> normals(int64_t n, uint64_t seed, double scale = 1.0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = scale * random_normal(seed, 9, static_cast<uint64_t>(i));
  return v;
}

// A scalar objective L = sum_i c_i y_i of an op's output y, so that dL/dy = c.
double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic against (f(x + h e_i) - f(x - h e_i)) / 2h for every i of x (or a sample).
void check(const char* what, std::vector<double>& x, const std::vector<double>& analytic,
           const std::function<double()>& f, double tolerance = 1e-7, int64_t stride = 1) {
  ASSERT_EQ(x.size(), analytic.size());
  const double h = 1e-5;
  double worst = 0;
  for (size_t i = 0; i < x.size(); i += static_cast<size_t>(stride)) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::fabs(numeric - analytic[i]) / std::max(1.0, std::fabs(numeric));
    worst = std::max(worst, err);
    EXPECT_LT(err, tolerance) << what << " element " << i << ": analytic " << analytic[i] << ", numeric " << numeric;
  }
  std::printf("%-18s worst relative error %.2e\n", what, worst);
}

TEST(GradientCheck, Matmul) {
  const int64_t M = 3, K = 5, N = 4;
  auto x = normals(M * K, 1), w = normals(K * N, 2);
  const auto c = normals(M * N, 3);
  std::vector<double> y(static_cast<size_t>(M * N)), dx(x.size()), dw(w.size());
  ref::matmul_backward_input(c.data(), w.data(), dx.data(), M, K, N);
  ref::matmul_backward_weight(x.data(), c.data(), dw.data(), M, K, N);
  auto f = [&] {
    ref::matmul(x.data(), w.data(), y.data(), M, K, N);
    return dot(c, y);
  };
  check("matmul dx", x, dx, f);
  check("matmul dw", w, dw, f);
}

TEST(GradientCheck, RmsNorm) {
  const int64_t R = 3, n = 7;
  auto x = normals(R * n, 4, 2.0), w = normals(n, 5);
  const auto c = normals(R * n, 6);
  std::vector<double> y(x.size()), dx(x.size()), dw(w.size());
  ref::rmsnorm_backward(x.data(), w.data(), c.data(), dx.data(), dw.data(), R, n, 1e-5);
  auto f = [&] {
    for (int64_t r = 0; r < R; ++r) ref::rmsnorm(x.data() + r * n, w.data(), y.data() + r * n, n, 1e-5);
    return dot(c, y);
  };
  check("rmsnorm dx", x, dx, f);
  check("rmsnorm dw", w, dw, f);
}

TEST(GradientCheck, Rope) {
  const int32_t heads = 2, hd = 6;
  std::vector<double> cos_t(3 * hd / 2), sin_t(cos_t.size());
  ref::rope_tables<double>(3, hd, 100.0f, cos_t.data(), sin_t.data());
  auto x = normals(heads * hd, 7);
  const auto c = normals(heads * hd, 8);
  auto dx = c;
  ref::rope_backward(dx.data(), heads, hd, cos_t.data() + 2 * hd / 2, sin_t.data() + 2 * hd / 2);
  auto f = [&] {
    auto y = x;
    ref::rope(y.data(), heads, hd, cos_t.data() + 2 * hd / 2, sin_t.data() + 2 * hd / 2);
    return dot(c, y);
  };
  check("rope dx", x, dx, f);
}

TEST(GradientCheck, Attention) {
  // One sequence, a key/value head serving two query heads (grouped-query attention).
  const int64_t T = 5;
  const int32_t group = 2, hd = 4;
  const double scale = ref::attention_scale<double>(hd);
  auto q = normals(T * group * hd, 10), k = normals(T * hd, 11), v = normals(T * hd, 12);
  const auto c = normals(T * group * hd, 13);
  std::vector<double> dq(q.size()), dk(k.size()), dv(v.size()), scratch(static_cast<size_t>(2 * group * T * T));
  ref::attention_backward(q.data(), group * hd, k.data(), v.data(), hd, c.data(), group * hd, dq.data(), group * hd, dk.data(),
                          dv.data(), hd, T, group, hd, scale, scratch.data());
  auto f = [&] {
    std::vector<double> out(q.size()), scores(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      for (int32_t h = 0; h < group; ++h)
        ref::attention(q.data() + t * group * hd + h * hd, k.data(), v.data(), hd, t + 1, hd, scale,
                       out.data() + t * group * hd + h * hd, scores.data());
    return dot(c, out);
  };
  check("attention dq", q, dq, f);
  check("attention dk", k, dk, f);
  check("attention dv", v, dv, f);
}

TEST(GradientCheck, SwiGlu) {
  const int64_t n = 9;
  auto g = normals(n, 14, 3.0), u = normals(n, 15);
  const auto c = normals(n, 16);
  std::vector<double> h(static_cast<size_t>(n)), dg(h.size()), du(h.size());
  ref::swiglu_backward(g.data(), u.data(), c.data(), dg.data(), du.data(), n);
  auto f = [&] {
    ref::swiglu(g.data(), u.data(), h.data(), n);
    return dot(c, h);
  };
  check("swiglu dgate", g, dg, f);
  check("swiglu dup", u, du, f);
}

TEST(GradientCheck, CrossEntropy) {
  const int32_t V = 11;
  auto z = normals(V, 17, 2.0);
  std::vector<double> dz(static_cast<size_t>(V));
  ref::cross_entropy_backward(z.data(), V, 4, 3.0, dz.data());
  auto f = [&] { return ref::cross_entropy(z.data(), V, 4) / 3.0; };
  check("cross-entropy dz", z, dz, f);
}

TEST(GradientCheck, Embedding) {
  const int32_t V = 4;
  const int64_t R = 6, d = 3;
  const std::vector<int32_t> ids = {1, 3, 1, 0, 1, 3};
  auto e = normals(V * d, 18);
  const auto c = normals(R * d, 19);
  std::vector<double> de(e.size());
  ref::embedding_backward(ids.data(), c.data(), de.data(), R, V, d);
  auto f = [&] {
    double s = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t i = 0; i < d; ++i) s += c[static_cast<size_t>(r * d + i)] * e[static_cast<size_t>(ids[static_cast<size_t>(r)] * d + i)];
    return s;
  };
  check("embedding", e, de, f);
}

TEST(GradientCheck, WholeModel) {
  ModelConfig c = test::tiny_gqa_config(6);
  c.batch = 2;
  c.vocab_size = 23;
  const train::RopeTables<double> rope(c);
  const ParameterRegistry reg(c);
  // Larger-than-init weights so every path carries gradient.
  std::vector<double> params = normals(reg.total(), 20, 0.3);
  for (const auto& e : reg.entries())
    if (e.shape.size() == 1)
      for (int64_t i = 0; i < e.count; ++i) params[static_cast<size_t>(e.offset + i)] = 1.0 + 0.1 * params[static_cast<size_t>(e.offset + i)];
  auto ids = test::random_ids(c.batch * (c.length + 1), c.vocab_size, 21);
  ids[static_cast<size_t>(c.length)] = -100;
  std::vector<double> grad(params.size());
  train::reference_loss_and_gradient<double>(c, rope, params.data(), ids.data(), c.batch, grad.data());
  auto f = [&] { return train::reference_loss_and_gradient<double>(c, rope, params.data(), ids.data(), c.batch, nullptr); };
  check("whole model", params, grad, f, 2e-7, 7);
}

}  // namespace
}  // namespace lockstep
