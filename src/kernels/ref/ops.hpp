// The reference kernels: docs/ARITHMETIC.md in code, single-threaded and scalar. Every fast
// kernel in kernels/simd has its twin here and a test that compares the two with memcmp.
// Shapes are given as [rows, cols], row-major; matrices are [in, out] (out contiguous).
#pragma once

#include <cstdint>

namespace lockstep::ref {

// y [M, N] = x [M, K] @ w [K, N]: each y[m, n] is one fma chain over k = 0, 1, ..., K-1,
// starting from +0: acc = fma(x[m, k], w[k, n], acc).
void matmul(const float* x, const float* w, float* y, int64_t M, int64_t K, int64_t N);

// The same with both operands rounded to bf16 first (precision bf16); products are exact in
// f32, so each step rounds once, as in matmul.
void matmul_bf16(const float* x, const float* w_bf16, float* y, int64_t M, int64_t K, int64_t N);

// y [n] = x [n] * (1 / sqrt(mean(x^2) + eps)) * w [n]: the sum of squares is one fma chain in
// increasing i; y[i] = (x[i] * r) * w[i].
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps);

// Rotates interleaved pairs (2i, 2i+1) of each head of v [n_heads, head_dim] in place by the
// angles of one position: cos_row, sin_row [head_dim / 2].
//   v0' = v0 * c - v1 * s,  v1' = v0 * s + v1 * c   (each product rounded, then the sum)
void rope(float* v, int32_t n_heads, int32_t head_dim, const float* cos_row, const float* sin_row);

// The RoPE tables for positions [0, length): cos, sin [length, head_dim / 2], computed in f64
// from lockstep's own exp, log and sincos and rounded to f32 (docs/ARITHMETIC.md, "RoPE").
void rope_tables(int32_t length, int32_t head_dim, float theta, float* cos_out, float* sin_out);

// One query row of causal attention for one head, over keys and values at positions [0, n):
//   s_j = dot(q, k_j) * scale      dot: fma chain over d from +0
//   m = max_j s_j                  NaN skipped, from -inf, increasing j
//   for j = 0..n-1: e = exp(s_j - m); l = l + e; acc[d] = fma(e, v_j[d], acc[d])
//   out[d] = acc[d] / l
// k and v are [n, stride] with the head's head_dim values at offset 0 of each row.
// `scores` is scratch of n floats.
void attention(const float* q, const float* k, const float* v, int64_t stride, int64_t n,
               int32_t head_dim, float scale, float* out, float* scores);

// h [n] = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
void swiglu(const float* gate, const float* up, float* h, int64_t n);

// Next-token loss at one position: log(sum_j exp(z_j - m)) - (z_target - m), m the max of z
// (NaN skipped), the sum in increasing j.
float cross_entropy(const float* logits, int32_t vocab, int32_t target);

// The attention scale 1 / sqrt(head_dim), rounded once after the sqrt.
float attention_scale(int32_t head_dim);

}  // namespace lockstep::ref
