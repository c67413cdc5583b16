// The reference kernels: docs/ARITHMETIC.md in code, single-threaded and scalar. Every fast
// kernel in kernels/simd has its twin here and a test that compares the two with memcmp.
// Each kernel is a template over the scalar type: the f32 instances are the profile; the f64
// instances run the same formulas in double for the finite-difference gradient checks.
// Shapes are given as [rows, cols], row-major; matrices are [in, out] (out contiguous).
#pragma once

#include <cstdint>

#include "core/host_math.hpp"
#include "kernels/ref/math.hpp"

namespace lockstep::ref {

// The elementary functions of each scalar type: the profile's own in f32 (math.hpp), lockstep's
// f64 ones (core/host_math.hpp) in double.
template <typename T>
struct Scalar;
template <>
struct Scalar<float> {
  static float exp(float x) { return exp_f32(x); }
  static float log(float x) { return log_f32(x); }
};
template <>
struct Scalar<double> {
  static double exp(double x) { return host_exp(x); }
  static double log(double x) { return host_log(x); }
};

// ---- forward ------------------------------------------------------------------------------

// y [M, N] = x [M, K] @ w [K, N]: each y[m, n] is one fma chain over k = 0, 1, ..., K-1,
// starting from +0: acc = fma(x[m, k], w[k, n], acc).
template <typename T>
void matmul(const T* x, const T* w, T* y, int64_t M, int64_t K, int64_t N);

// The same with both operands rounded to bf16 first (precision bf16); products are exact in
// f32, so each step rounds once, as in matmul.
void matmul_bf16(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N);

// y [n] = x [n] * (1 / sqrt(mean(x^2) + eps)) * w [n]: the sum of squares is one fma chain in
// increasing i; y[i] = (x[i] * r) * w[i].
template <typename T>
void rmsnorm(const T* x, const T* w, T* y, int64_t n, T eps);

// Rotates interleaved pairs (2i, 2i+1) of each head of v [n_heads, head_dim] in place by the
// angles of one position: cos_row, sin_row [head_dim / 2].
//   v0' = v0 * c - v1 * s,  v1' = v0 * s + v1 * c   (each product rounded, then the sum)
template <typename T>
void rope(T* v, int32_t n_heads, int32_t head_dim, const T* cos_row, const T* sin_row);

// Llama 3's frequency scaling (docs/ARITHMETIC.md, "RoPE"), its parameters widened to f64.
struct RopeLlama3 {
  double factor, low_freq_factor, high_freq_factor, original_max_position;
};

// The RoPE tables for positions [0, length): cos, sin [length, head_dim / 2], computed in f64
// from lockstep's own exp, log and sincos and rounded to T (docs/ARITHMETIC.md, "RoPE"), with
// each frequency scaled as Llama 3 defines when `llama3` is given.
template <typename T>
void rope_tables(int32_t length, int32_t head_dim, float theta, T* cos_out, T* sin_out,
                 const RopeLlama3* llama3 = nullptr);

// One query row of causal attention for one head, over keys and values at positions [0, n):
//   s_j = dot(q, k_j) * scale      dot: fma chain over d from +0
//   m = max_j s_j                  NaN skipped, from -inf, increasing j
//   for j = 0..n-1: e = exp(s_j - m); l = l + e; acc[d] = fma(e, v_j[d], acc[d])
//   out[d] = acc[d] / l
// k and v are [n, stride] with the head's head_dim values at offset 0 of each row.
// `scores` is scratch of n values.
template <typename T>
void attention(const T* q, const T* k, const T* v, int64_t stride, int64_t n, int32_t head_dim,
               T scale, T* out, T* scores);

// h [n] = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
template <typename T>
void swiglu(const T* gate, const T* up, T* h, int64_t n);

// Next-token loss at one position: log(sum_j exp(z_j - m)) - (z_target - m), m the max of z
// (NaN skipped), the sum in increasing j.
template <typename T>
T cross_entropy(const T* logits, int32_t vocab, int32_t target);

// The attention scale 1 / sqrt(head_dim), rounded once after the sqrt.
template <typename T>
T attention_scale(int32_t head_dim);

// ---- backward (docs/ARITHMETIC.md, "Training") --------------------------------------------

// dx [M, K] = dy [M, N] @ w^T: dx[m, k] = fma chain over n in increasing n from +0 of
// fma(dy[m, n], w[k, n], acc). Overwrites dx.
template <typename T>
void matmul_backward_input(const T* dy, const T* w, T* dx, int64_t M, int64_t K, int64_t N);

// dw [K, N] = x^T @ dy: dw[k, n] = fma chain over rows m in increasing m from +0 of
// fma(x[m, k], dy[m, n], acc). Overwrites dw.
template <typename T>
void matmul_backward_weight(const T* x, const T* dy, T* dw, int64_t M, int64_t K, int64_t N);

// RMSNorm over R rows of n: dx [R, n] (overwritten) and dw [n] (overwritten) from dy [R, n].
// Per row: r and xhat[i] = x[i] * r as the forward; g[i] = dy[i] * w[i]; s = fma chain over i
// of g[i] * xhat[i]; c = s / n; dx[i] = r * (g[i] - xhat[i] * c).
// dw[i] = fma chain over rows in increasing row of dy[row, i] * xhat[row, i], from +0.
template <typename T>
void rmsnorm_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, int64_t R, int64_t n, T eps);

// The transpose of rope: dx0 = dy0 * c + dy1 * s, dx1 = dy1 * c - dy0 * s.
template <typename T>
void rope_backward(T* dv, int32_t n_heads, int32_t head_dim, const T* cos_row, const T* sin_row);

// Causal attention backward for one sequence of T positions and one key/value head serving
// `group` query heads. q [T, group, head_dim] (after RoPE), k and v [T, head_dim], dout
// [T, group, head_dim] with row strides as given. Writes dq [T, group, head_dim] (rows
// dq_stride apart), dk and dv [T, head_dim] (rows dkv_stride apart; all overwritten). With p_tj = exp(s_tj - m_t) / l_t recomputed as the forward:
//   dp_tj = fma chain over d of dout_t[d] * v_j[d]
//   D_t = fma chain over j <= t of p_tj * dp_tj
//   ds_tj = (p_tj * (dp_tj - D_t)) * scale
//   dq_t[d] = fma chain over j = 0..t of ds_tj * k_j[d]
//   dk_j[d] = fma chain over heads h of the group, then t = j..T-1, of ds_htj * q_ht[d]
//   dv_j[d] = fma chain over heads h of the group, then t = j..T-1, of p_htj * dout_ht[d]
// `scratch` holds 2 * group * T * T values.
template <typename T>
void attention_backward(const T* q, int64_t q_stride, const T* k, const T* v, int64_t kv_stride,
                        const T* dout, int64_t dout_stride, T* dq, int64_t dq_stride, T* dk, T* dv, int64_t dkv_stride,
                        int64_t T_len, int32_t group, int32_t head_dim, T scale, T* scratch);

// SwiGLU backward: with e = exp(-g), s = 1 / (1 + e), silu = g / (1 + e):
//   dup = dh * silu;  dgate = (dh * up) * (s * (1 + g * (1 - s)))
template <typename T>
void swiglu_backward(const T* gate, const T* up, const T* dh, T* dgate, T* dup, int64_t n);

// The gradient of one position's loss, scaled by 1 / count: with p_j = exp(z_j - m) / sum as
// the forward, dz_j = (p_j - [j == target]) / count. Overwrites dz.
template <typename T>
void cross_entropy_backward(const T* logits, int32_t vocab, int32_t target, T count, T* dz);

// d_embed [vocab, d] (overwritten): row v is the sum, in increasing r, of dx[r] over the rows r
// whose id is v, from +0.
template <typename T>
void embedding_backward(const int32_t* ids, const T* dx, T* d_embed, int64_t R, int32_t vocab, int64_t d);

}  // namespace lockstep::ref
