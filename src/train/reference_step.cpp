#include "train/reference_step.hpp"

#include <algorithm>
#include <type_traits>

#include "kernels/ref/ops.hpp"

namespace lockstep::train {
namespace {

// A matmul operand as the precision sees it: rounded to bf16 under bf16 (f32 only).
template <typename T>
std::vector<T> operand(const T* x, int64_t n, bool bf16) {
  std::vector<T> out(x, x + n);
  if constexpr (std::is_same_v<T, float>) {
    if (bf16)
      for (T& v : out) v = ref::round_bf16(v);
  }
  return out;
}

// y [M, N] = x [M, K] @ w [K, N]
template <typename T>
void linear(const T* x, const T* w, T* y, int64_t M, int64_t K, int64_t N, bool bf16) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16) return ref::matmul_bf16(x, w, y, M, K, N);
  }
  ref::matmul(x, w, y, M, K, N);
}

// dw [K, N] = x^T @ dy, each output a chain over the M rows.
template <typename T>
void weight_grad(const T* x, const T* dy, T* dw, int64_t M, int64_t K, int64_t N, bool bf16) {
  const auto xs = operand(x, M * K, bf16), dys = operand(dy, M * N, bf16);
  ref::matmul_backward_weight(xs.data(), dys.data(), dw, M, K, N);
}

// dx [M, K] = [dy_0 | dy_1 | ...] @ [w_0 | w_1 | ...]^T: one chain per output over the
// concatenated columns, as the fast path's fused matrices compute it.
template <typename T>
struct Part {
  const T* dy;
  const T* w;
  int64_t N;
};
template <typename T>
void input_grad(std::initializer_list<Part<T>> parts, T* dx, int64_t M, int64_t K, bool bf16) {
  int64_t N = 0;
  for (const auto& p : parts) N += p.N;
  std::vector<T> dy(static_cast<size_t>(M * N)), w(static_cast<size_t>(K * N));
  int64_t col = 0;
  for (const auto& p : parts) {
    for (int64_t m = 0; m < M; ++m) std::copy_n(p.dy + m * p.N, p.N, dy.begin() + m * N + col);
    for (int64_t k = 0; k < K; ++k) std::copy_n(p.w + k * p.N, p.N, w.begin() + k * N + col);
    col += p.N;
  }
  const auto dys = operand(dy.data(), M * N, bf16), ws = operand(w.data(), K * N, bf16);
  ref::matmul_backward_input(dys.data(), ws.data(), dx, M, K, N);
}

// The activations the backward pass reads, per layer.
template <typename T>
struct LayerCache {
  std::vector<T> x_in, xn1, q, k, v, att, x_mid, xn2, gate, up, h;
};

}  // namespace

template <typename T>
RopeTables<T>::RopeTables(const ModelConfig& c)
    : cos(static_cast<size_t>(c.length) * static_cast<size_t>(c.head_dim() / 2)), sin(cos.size()) {
  ref::rope_tables<T>(c.length, c.head_dim(), c.rope_theta, cos.data(), sin.data());
}

template <typename T>
T reference_loss_and_gradient(const ModelConfig& c, const RopeTables<T>& rope, const T* p,
                              const int32_t* ids, int64_t rows, T* grad, bool bf16) {
  const ParameterRegistry reg(c);
  const int64_t L = c.length, R = rows * L, d = c.d_model, hd = c.head_dim(), qd = c.q_dim(),
                kv = c.kv_dim(), ff = c.d_ff, V = c.vocab_size, half = hd / 2;
  const int32_t group = c.n_heads / c.n_kv_heads;
  const T eps = static_cast<T>(c.norm_eps);
  const T scale = ref::attention_scale<T>(static_cast<int32_t>(hd));
  auto sz = [](int64_t n) { return static_cast<size_t>(n); };
  auto input = [&](int64_t r) { return ids[(r / L) * (L + 1) + r % L]; };
  auto target = [&](int64_t r) { return ids[(r / L) * (L + 1) + r % L + 1]; };

  // ---- forward ----
  std::vector<LayerCache<T>> cache(static_cast<size_t>(c.n_layers));
  std::vector<T> x(sz(R * d));
  for (int64_t r = 0; r < R; ++r) std::copy_n(p + reg.embed() + input(r) * d, d, x.begin() + r * d);
  std::vector<T> scores(sz(L));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const auto& w = reg.layer(l);
    LayerCache<T>& a = cache[sz(l)];
    a.x_in = x;
    a.xn1.resize(sz(R * d));
    for (int64_t r = 0; r < R; ++r) ref::rmsnorm(x.data() + r * d, p + w.attn_norm, a.xn1.data() + r * d, d, eps);
    a.q.resize(sz(R * qd));
    a.k.resize(sz(R * kv));
    a.v.resize(sz(R * kv));
    linear(a.xn1.data(), p + w.wq, a.q.data(), R, d, qd, bf16);
    linear(a.xn1.data(), p + w.wk, a.k.data(), R, d, kv, bf16);
    linear(a.xn1.data(), p + w.wv, a.v.data(), R, d, kv, bf16);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r % L;
      ref::rope(a.q.data() + r * qd, c.n_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half, rope.sin.data() + t * half);
      ref::rope(a.k.data() + r * kv, c.n_kv_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half, rope.sin.data() + t * half);
    }
    a.att.resize(sz(R * qd));
    for (int64_t r = 0; r < R; ++r) {
      const int64_t row0 = (r / L) * L, t = r % L;
      for (int32_t h = 0; h < c.n_heads; ++h) {
        const int64_t g = h / group;
        ref::attention(a.q.data() + r * qd + h * hd, a.k.data() + row0 * kv + g * hd, a.v.data() + row0 * kv + g * hd,
                       kv, t + 1, static_cast<int32_t>(hd), scale, a.att.data() + r * qd + h * hd, scores.data());
      }
    }
    std::vector<T> o(sz(R * d));
    linear(a.att.data(), p + w.wo, o.data(), R, qd, d, bf16);
    for (int64_t i = 0; i < R * d; ++i) x[sz(i)] = x[sz(i)] + o[sz(i)];
    a.x_mid = x;
    a.xn2.resize(sz(R * d));
    for (int64_t r = 0; r < R; ++r) ref::rmsnorm(x.data() + r * d, p + w.mlp_norm, a.xn2.data() + r * d, d, eps);
    a.gate.resize(sz(R * ff));
    a.up.resize(sz(R * ff));
    a.h.resize(sz(R * ff));
    linear(a.xn2.data(), p + w.w_gate, a.gate.data(), R, d, ff, bf16);
    linear(a.xn2.data(), p + w.w_up, a.up.data(), R, d, ff, bf16);
    ref::swiglu(a.gate.data(), a.up.data(), a.h.data(), R * ff);
    linear(a.h.data(), p + w.w_down, o.data(), R, ff, d, bf16);
    for (int64_t i = 0; i < R * d; ++i) x[sz(i)] = x[sz(i)] + o[sz(i)];
  }
  std::vector<T> xnf(sz(R * d)), logits(sz(R * V));
  for (int64_t r = 0; r < R; ++r) ref::rmsnorm(x.data() + r * d, p + reg.final_norm(), xnf.data() + r * d, d, eps);
  linear(xnf.data(), p + reg.head(), logits.data(), R, d, V, bf16);
  T total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (target(r) == ignored_target) continue;
    total = total + ref::cross_entropy(logits.data() + r * V, static_cast<int32_t>(V), target(r));
    ++count;
  }
  const T loss = total / static_cast<T>(count);
  if (!grad) return loss;

  // ---- backward ----
  std::vector<T> dlogits(sz(R * V), T(0));
  for (int64_t r = 0; r < R; ++r)
    if (target(r) != ignored_target)
      ref::cross_entropy_backward(logits.data() + r * V, static_cast<int32_t>(V), target(r), static_cast<T>(count),
                                  dlogits.data() + r * V);
  weight_grad(xnf.data(), dlogits.data(), grad + reg.head(), R, d, V, bf16);
  std::vector<T> dxn(sz(R * d)), dx(sz(R * d)), dbranch(sz(R * d));
  input_grad<T>({{dlogits.data(), p + reg.head(), V}}, dxn.data(), R, d, bf16);
  ref::rmsnorm_backward(x.data(), p + reg.final_norm(), dxn.data(), dx.data(), grad + reg.final_norm(), R, d, eps);
  std::vector<T> attn_scratch(sz(2 * group * L * L));
  for (int32_t l = c.n_layers - 1; l >= 0; --l) {
    const auto& w = reg.layer(l);
    const LayerCache<T>& a = cache[sz(l)];
    // x_out = x_mid + h @ w_down
    std::vector<T> dh(sz(R * ff)), dgate(sz(R * ff)), dup(sz(R * ff));
    input_grad<T>({{dx.data(), p + w.w_down, d}}, dh.data(), R, ff, bf16);
    weight_grad(a.h.data(), dx.data(), grad + w.w_down, R, ff, d, bf16);
    ref::swiglu_backward(a.gate.data(), a.up.data(), dh.data(), dgate.data(), dup.data(), R * ff);
    weight_grad(a.xn2.data(), dgate.data(), grad + w.w_gate, R, d, ff, bf16);
    weight_grad(a.xn2.data(), dup.data(), grad + w.w_up, R, d, ff, bf16);
    input_grad<T>({{dgate.data(), p + w.w_gate, ff}, {dup.data(), p + w.w_up, ff}}, dxn.data(), R, d, bf16);
    ref::rmsnorm_backward(a.x_mid.data(), p + w.mlp_norm, dxn.data(), dbranch.data(), grad + w.mlp_norm, R, d, eps);
    for (int64_t i = 0; i < R * d; ++i) dx[sz(i)] = dx[sz(i)] + dbranch[sz(i)];
    // x_mid = x_in + att @ wo
    std::vector<T> datt(sz(R * qd)), dq(sz(R * qd)), dk(sz(R * kv)), dv(sz(R * kv));
    input_grad<T>({{dx.data(), p + w.wo, d}}, datt.data(), R, qd, bf16);
    weight_grad(a.att.data(), dx.data(), grad + w.wo, R, qd, d, bf16);
    for (int64_t b = 0; b < rows; ++b) {
      const int64_t r0 = b * L;
      for (int32_t g = 0; g < c.n_kv_heads; ++g) {
        const int64_t qo = static_cast<int64_t>(g) * group * hd, ko = static_cast<int64_t>(g) * hd;
        ref::attention_backward(a.q.data() + r0 * qd + qo, qd, a.k.data() + r0 * kv + ko, a.v.data() + r0 * kv + ko, kv,
                                datt.data() + r0 * qd + qo, qd, dq.data() + r0 * qd + qo, qd, dk.data() + r0 * kv + ko,
                                dv.data() + r0 * kv + ko, kv, L, group, static_cast<int32_t>(hd), scale,
                                attn_scratch.data());
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const int64_t t = r % L;
      ref::rope_backward(dq.data() + r * qd, c.n_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half, rope.sin.data() + t * half);
      ref::rope_backward(dk.data() + r * kv, c.n_kv_heads, static_cast<int32_t>(hd), rope.cos.data() + t * half, rope.sin.data() + t * half);
    }
    weight_grad(a.xn1.data(), dq.data(), grad + w.wq, R, d, qd, bf16);
    weight_grad(a.xn1.data(), dk.data(), grad + w.wk, R, d, kv, bf16);
    weight_grad(a.xn1.data(), dv.data(), grad + w.wv, R, d, kv, bf16);
    input_grad<T>({{dq.data(), p + w.wq, qd}, {dk.data(), p + w.wk, kv}, {dv.data(), p + w.wv, kv}}, dxn.data(), R, d, bf16);
    ref::rmsnorm_backward(a.x_in.data(), p + w.attn_norm, dxn.data(), dbranch.data(), grad + w.attn_norm, R, d, eps);
    for (int64_t i = 0; i < R * d; ++i) dx[sz(i)] = dx[sz(i)] + dbranch[sz(i)];
  }
  std::vector<int32_t> inputs(sz(R));
  for (int64_t r = 0; r < R; ++r) inputs[sz(r)] = input(r);
  ref::embedding_backward(inputs.data(), dx.data(), grad + reg.embed(), R, static_cast<int32_t>(V), d);
  return loss;
}

template struct RopeTables<float>;
template struct RopeTables<double>;
template float reference_loss_and_gradient<float>(const ModelConfig&, const RopeTables<float>&, const float*,
                                                  const int32_t*, int64_t, float*, bool);
template double reference_loss_and_gradient<double>(const ModelConfig&, const RopeTables<double>&, const double*,
                                                    const int32_t*, int64_t, double*, bool);

}  // namespace lockstep::train
