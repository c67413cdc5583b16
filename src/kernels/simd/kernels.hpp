// The fast kernels' interface: one table of function pointers per SIMD target, filled in by the
// per-target code under kernels/simd (written once with Highway, compiled for each target).
// Every entry computes exactly the bits of its twin in kernels/ref; each entry's comment names
// the twin and any layout difference.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

namespace lockstep::simd {

// Floats aligned to 64 bytes, for packed weights and workspaces.
struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;
inline AlignedFloats aligned_floats(size_t n) {
  const size_t bytes = ((n * sizeof(float) + 63) / 64) * 64;
  void* p = std::aligned_alloc(64, bytes == 0 ? 64 : bytes);
  if (!p) throw std::bad_alloc();
  return AlignedFloats(static_cast<float*>(p));
}

// A matrix B [K, N] repacked for the matmul kernel: panels of `panel` columns, each panel stored
// k-major ([K][panel], columns past N zero), so the kernel streams one contiguous block.
struct PackedMatrix {
  int64_t K = 0;
  int64_t N = 0;
  int32_t panel = 0;
  int64_t panels = 0;
  AlignedFloats data;
  const float* panel_data(int64_t p) const { return data.get() + p * K * panel; }
};

struct Kernels {
  const char* name = "";    // the Highway target's name, or "portable"
  int64_t target = 0;       // the Highway target bit
  int32_t panel_width = 0;  // columns per packed panel this target's matmul expects
  int32_t row_block = 0;    // rows the matmul kernel computes at once

  // ref::matmul. c [M, N] (row stride ldc) = a [M, K] (row stride lda) @ b, for the columns of
  // panels [p_begin, p_end). Each output is one fma chain in increasing k from +0.
  void (*matmul)(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
                 int64_t p_end, float* c, int64_t ldc) = nullptr;
  // ref::rmsnorm.
  void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps) = nullptr;
  // ref::rope.
  void (*rope)(float* v, int32_t n_heads, int32_t head_dim, const float* cos_row,
               const float* sin_row) = nullptr;
  // ref::attention with the keys transposed: kt [head_dim, ldk] (key j's d-th value at
  // kt[d * ldk + j]); values v [n, ldv]. scratch holds n floats.
  void (*attention)(const float* q, const float* kt, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n, int32_t head_dim, float scale, float* out, float* scratch) = nullptr;
  // ref::swiglu.
  void (*swiglu)(const float* gate, const float* up, float* h, int64_t n) = nullptr;
  // x[i] = x[i] + y[i] (the residual add).
  void (*add)(float* x, const float* y, int64_t n) = nullptr;
  // ref::cross_entropy.
  float (*cross_entropy)(const float* logits, int32_t vocab, int32_t target) = nullptr;
  // y[i] = ref::round_bf16(x[i]).
  void (*round_bf16)(const float* x, float* y, int64_t n) = nullptr;
  // y[i] = ref::exp_f32(x[i]) and ref::log_f32(x[i]); exposed for the exactness tests.
  void (*exp)(const float* x, float* y, int64_t n) = nullptr;
  void (*log)(const float* x, float* y, int64_t n) = nullptr;
};

// Packs w [K, N] (row stride ldw) for `kernels`' matmul.
PackedMatrix pack_matrix(const Kernels& kernels, const float* w, int64_t K, int64_t N, int64_t ldw);
// Packs the column-wise concatenation [w0 | w1 | ...] of matrices that share K.
struct MatrixPart {
  const float* w;
  int64_t N;
};
PackedMatrix pack_concat(const Kernels& kernels, const MatrixPart* parts, int n_parts, int64_t K);

}  // namespace lockstep::simd
