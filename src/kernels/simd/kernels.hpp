// The fast kernels' interface: one table of function pointers per SIMD target, filled in by the
// per-target code under kernels/simd (written once with Highway, compiled for each target).
// Every entry computes exactly the bits of its twin in kernels/ref; each entry's comment names
// the twin and any layout difference.
#pragma once

#include <bit>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>

#include "kernels/ref/optimizer.hpp"

namespace lockstep::simd {

// Floats aligned to 64 bytes, for packed weights and workspaces. Not `owned`: a slice of a block
// someone else frees (WeightArena).
struct AlignedFree {
  bool owned = true;
  void operator()(float* p) const {
    if (owned) std::free(p);
  }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;
// n floats, 64-byte aligned; from 4 MiB up, 2 MiB aligned and advised onto huge pages where the
// system gives them (fewer TLB misses when decoding streams every weight once per token).
AlignedFloats aligned_floats(size_t n);

struct BlockMatrix;  // kernels/simd/block_matrix.hpp

// A matrix B [K, N] repacked for the matmul kernel: panels of `panel` columns, each panel stored
// k-major ([K][panel], columns past N zero), so the kernel streams one contiguous block.
//
// Under precision bf16 the weights are bf16 values already, and may be stored as their 16-bit
// halves (`bf16`): the kernel widens each back to the same f32 value exactly (bits << 16), so the
// chains are unchanged and the weights move at half the bytes (decoding is memory-bound).
//
// A q8 model's matrices (quant/q8.hpp) may be stored packed (`q8`): int8 values in the same panel
// layout ([K][panel] bytes per panel) and one f32 scale per column (`scales`, [panels * panel],
// 0 past N). The kernel computes each weight as float(q) * scale, one rounded f32 multiply, which
// is exactly the expanded model's weight, then the same fma chain: a quarter of the bytes, the
// same bits.
//
// A q4 model's matrices (quant/q4.hpp) may be stored packed (`q4`): per panel, rows k taken in
// pairs, byte (k / 2, j) holding column j's 4-bit value at row k (low nibble, even k) and k + 1
// (high nibble; 0 past K), [ceil(K / 2)][panel] bytes; scales [panels][groups][panel], one per 32
// rows (quant::kQ4Group) per column. The weight is float(q) * scale[k / 32], then the chain.
struct PackedMatrix {
  int64_t K = 0;
  int64_t N = 0;
  int32_t panel = 0;
  int64_t panels = 0;
  bool bf16 = false;
  bool q8 = false;
  bool q4 = false;
  int64_t groups = 0;    // q4: ceil(K / 32)
  // An int8dot model's matrix in GGUF blocks (kernels/simd/block_matrix.hpp): computed by
  // matmul_blocks from quantized activations, never by `matmul`; panel is kBlockGroup and the
  // panels are its groups, so that the split into items is the same code.
  std::shared_ptr<const BlockMatrix> blocks;
  AlignedFloats data;
  AlignedFloats scales;  // q8: [panels * panel]; q4: [panels][groups][panel]
  const float* panel_data(int64_t p) const { return data.get() + p * K * panel; }
  const uint16_t* panel_data16(int64_t p) const {
    return reinterpret_cast<const uint16_t*>(data.get()) + p * K * panel;
  }
  const int8_t* panel_data8(int64_t p) const { return reinterpret_cast<const int8_t*>(data.get()) + p * K * panel; }
  const float* panel_scales(int64_t p) const { return scales.get() + p * panel; }
  const uint8_t* panel_data4(int64_t p) const {
    return reinterpret_cast<const uint8_t*>(data.get()) + p * ((K + 1) / 2) * panel;
  }
  const float* panel_scales4(int64_t p) const { return scales.get() + p * groups * panel; }
  // Weight (k, col) as the kernels compute it, f32: stored, widened or float(q) * scale.
  float weight(int64_t k, int64_t col) const {
    const int64_t p = col / panel, j = col % panel;
    if (q8) return static_cast<float>(panel_data8(p)[k * panel + j]) * panel_scales(p)[j];
    if (q4) {
      const uint8_t byte = panel_data4(p)[(k / 2) * panel + j];
      const int nibble = k % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      return static_cast<float>(nibble >= 8 ? nibble - 16 : nibble) * panel_scales4(p)[(k / 32) * panel + j];
    }
    if (bf16) {
      return std::bit_cast<float>(static_cast<uint32_t>(panel_data16(p)[k * panel + j]) << 16);
    }
    return panel_data(p)[k * panel + j];
  }
  // Bytes the matmul streams (the weights and their scales).
  size_t bytes() const {
    const size_t elements = static_cast<size_t>(panels * K * panel);
    if (q4) return static_cast<size_t>(panels * ((K + 1) / 2) * panel) + static_cast<size_t>(panels * groups * panel) * 4;
    return q8 ? elements + static_cast<size_t>(panels * panel) * 4 : elements * (bf16 ? 2 : 4);
  }
};

// The most queries attention_queries computes as one tile (more go in several tiles).
constexpr int kMaxTileQueries = 64;

// Attention's keys (the KV cache's, for every layer) lie in blocks of kKeysPerBlock positions:
// keys of dimension `dim` over `positions` as [key_blocks(positions)][dim][kKeysPerBlock], key
// j's e-th value at (j / 16) * (dim * 16) + e * 16 + j % 16. A vector of up to 16 lanes runs
// along j within a block, and positions [0, n) are one contiguous prefix of the memory (whole
// blocks, the last one partly written). The keys of one head (e in [g * head_dim, (g + 1) *
// head_dim)) start at g * head_dim * 16; consecutive blocks lie key_block_stride(dim) apart.
constexpr int64_t kKeysPerBlock = 16;
constexpr int64_t key_blocks(int64_t positions) { return (positions + kKeysPerBlock - 1) / kKeysPerBlock; }
constexpr int64_t key_block_stride(int64_t dim) { return dim * kKeysPerBlock; }
// Where key j's dimension 0 lies from the first block's (its dimension d kKeysPerBlock * d further).
constexpr int64_t key_column(int64_t j, int64_t block_stride) {
  return j / kKeysPerBlock * block_stride + j % kKeysPerBlock;
}

// Attention's values lie in the same blocks of kKeysPerBlock positions, each head's 16 rows
// contiguous: values of dimension `dim` (heads of head_dim) over `positions` as
// [key_blocks(positions)][dim / head_dim][kKeysPerBlock][head_dim], value j's e-th for head g at
// (j / 16) * (dim * 16) + g * head_dim * 16 + (j % 16) * head_dim + e. A span of one head's
// values is then runs of 16 rows in a row (head_dim * 64 bytes, spread evenly over the L1 sets),
// where rows dim floats apart would crowd into a few sets. The kernels read value j of one head
// at value_row(j, row_stride, block_stride) from the head's first row: row_stride head_dim and
// block_stride key_block_stride(dim) in this layout; plain rows [n][ldv] are row_stride ldv and
// block_stride 16 * ldv.
constexpr int64_t value_row(int64_t j, int64_t row_stride, int64_t block_stride) {
  return j / kKeysPerBlock * block_stride + j % kKeysPerBlock * row_stride;
}

struct Kernels {
  const char* name = "";    // the Highway target's name, or "portable"
  int64_t target = 0;       // the Highway target bit
  int32_t panel_width = 0;  // columns per packed panel this target's matmul expects
  int32_t row_block = 0;    // rows the matmul kernel computes at once
  int32_t at_block = 0;     // rows of a matmul_at packs at once (see matmul_at_scratch_floats)
  // Panels a one-row matmul (decoding) should be given in multiples of: it sweeps the full
  // panels of its range in wide tiles (several panels at once, enough independent chains to
  // cover the FMA latency), and a range of a multiple of this many runs in such tiles only.
  int32_t decode_panels = 1;

  // ref::matmul. c [M, N] (row stride ldc) = a [M, K] (row stride lda) @ b, for the columns of
  // panels [p_begin, p_end). Each output is one fma chain in increasing k from +0.
  void (*matmul)(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
                 int64_t p_end, float* c, int64_t ldc) = nullptr;
  // matmul with a transposed: c [M, N] = a^T @ b for a [K, M] (row stride lda), the same chains
  // as `matmul` on the explicit transpose (weight gradients x^T @ dy). scratch holds
  // matmul_at_scratch_floats(M) floats.
  void (*matmul_at)(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
                    int64_t p_end, float* c, int64_t ldc, float* scratch) = nullptr;
  // matmul_at with every chain continued from the value already in c instead of +0: the chains
  // of a^T @ b over rows split in two, run in order, equal the whole (data-parallel training).
  void (*matmul_at_continue)(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
                             int64_t p_end, float* c, int64_t ldc, float* scratch) = nullptr;
  // ref::quantize_activations of rows [0, rows) of x (row stride lda): qx [rows, K] and
  // dx [rows, K / 32], the reference's bits for every finite row.
  void (*quantize_activations)(const float* x, int64_t lda, int64_t rows, int64_t K, int8_t* qx, float* dx) = nullptr;
  // ref::matmul_blocks_quantized (profile lockstep-int8dot-1) for the columns of groups
  // [g_begin, g_end) of w: y [M, N] (row stride ldy) from qx [M, K] and dx [M, K / 32], the rows
  // as ref::quantize_activations quantized them. Columns past N are not written.
  void (*matmul_blocks)(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin,
                        int64_t g_end, float* y, int64_t ldy) = nullptr;
  // Which integer dot product matmul_blocks runs, chosen when the table is filled from what the
  // CPU has (tests check the choice): "avx2 maddubs", "avx512 vnni", "neon sdot", "neon widening"
  // (vmull_s8, for Arm CPUs without the dot product), "sve sdot" or "scalar".
  const char* matmul_blocks_kernel = "scalar";
  // The same one output at a time with scalar integer sums: the portable kernel, kept in every
  // table so that tests and benchmarks can compare a target's vector kernel with it.
  void (*matmul_blocks_scalar)(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin,
                               int64_t g_end, float* y, int64_t ldy) = nullptr;
  int64_t matmul_at_scratch_floats(int64_t M) const {
    return (M + row_block - 1) / row_block * row_block * at_block;
  }
  // ref::rmsnorm.
  void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps) = nullptr;
  // ref::rmsnorm of rows [0, rows) of x into y (both [rows, n]); each row's 1 / sqrt(mean(x^2) +
  // eps), as ref::rmsnorm computes it, into inv_rms[row] when inv_rms is not null.
  void (*rmsnorm_rows)(const float* x, const float* w, float* y, float* inv_rms, int64_t rows, int64_t n,
                       float eps) = nullptr;
  // ref::rope.
  void (*rope)(float* v, int32_t n_heads, int32_t head_dim, const float* cos_row,
               const float* sin_row) = nullptr;
  // ref::attention with the keys in blocks (kKeysPerBlock above): key j's d-th value at
  // kt[(j / 16) * block_stride + d * 16 + j % 16], for one head's keys kt (its first block's
  // dimension 0) and block_stride floats from one block to the next (key_block_stride(kv_dim)
  // in the KV cache, head_dim * 16 for one head's keys alone). Every block up to the one holding
  // key n - 1 is whole: its keys at or past n are read (their scores discarded), so they must be
  // memory, written or not. Value j at v + value_row(j, ldv, v_block_stride) (above). scratch
  // holds n floats.
  void (*attention)(const float* q, const float* kt, int64_t block_stride, const float* v, int64_t ldv,
                    int64_t v_block_stride, int64_t n, int32_t head_dim, float scale, float* out,
                    float* scratch) = nullptr;
  // ref::attention for nq queries of one key/value head, query i (at q + i * q_stride)
  // reading keys [0, n[i]) with 1 <= n[0] <= n[1] <= ... and every key below n[nq - 1] written
  // (kt, block_stride, v, ldv and v_block_stride as `attention`'s; the key blocks up to key
  // n[nq - 1] - 1's are whole and read; scores of the keys at or past n are discarded); outputs
  // at out + i * out_stride. Sharing the loads of keys and values, each output
  // has the bits of `attention` alone. Up to 3 queries share each key's loads (up to 8 on
  // AVX-512, 6 at a time); more (prefill's runs of positions) go in tiles of up to
  // kMaxTileQueries that read the keys and values by blocks from L1. scratch holds
  // attention_queries_scratch(nq, n[nq - 1], head_dim) floats.
  void (*attention_queries)(const float* q, int64_t q_stride, const int64_t* n, int nq, const float* kt,
                            int64_t block_stride, const float* v, int64_t ldv, int64_t v_block_stride,
                            int32_t head_dim, float scale, float* out, int64_t out_stride,
                            float* scratch) = nullptr;
  int64_t (*attention_queries_scratch)(int nq, int64_t n_max, int32_t head_dim) = nullptr;
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
  // y[i] = ref::exp_f32(x[i]) for x[i] <= 0 or a quiet NaN, as the softmaxes take it
  // (math-inl.hpp's ExpOfNonPositive); exp itself on targets without a shorter form.
  void (*exp_of_non_positive)(const float* x, float* y, int64_t n) = nullptr;

  // ---- training (the twins of the backward kernels in kernels/ref/ops.hpp) ----

  // ref::rmsnorm_backward's per-row part for rows [0, rows) of x, dy, dx [rows, n], with each
  // row's inv_rms from the forward (rmsnorm_rows).
  void (*rmsnorm_backward_rows)(const float* x, const float* w, const float* dy, const float* inv_rms, float* dx,
                                int64_t rows, int64_t n) = nullptr;
  // ref::rmsnorm_backward's dw for columns [i0, i1): dw[i] = fma chain over the R rows of
  // dy[r, i] * xhat[r, i], with xhat[r, i] = x[r, i] * inv_rms[r] (inv_rms from the forward).
  void (*rmsnorm_backward_weight)(const float* x, const float* inv_rms, const float* dy, float* dw,
                                  int64_t R, int64_t n, int64_t i0, int64_t i1) = nullptr;
  // rmsnorm_backward_weight with each chain continued from dw's value instead of +0.
  void (*rmsnorm_backward_weight_continue)(const float* x, const float* inv_rms, const float* dy, float* dw,
                                           int64_t R, int64_t n, int64_t i0, int64_t i1) = nullptr;
  // ref::rope_backward.
  void (*rope_backward)(float* dv, int32_t n_heads, int32_t head_dim, const float* cos_row,
                        const float* sin_row) = nullptr;
  // ref::swiglu_backward.
  void (*swiglu_backward)(const float* gate, const float* up, const float* dh, float* dgate,
                          float* dup, int64_t n) = nullptr;
  // ref::cross_entropy_backward; also returns the position's loss (ref::cross_entropy).
  float (*cross_entropy_backward)(const float* logits, int32_t vocab, int32_t target, float count,
                                  float* dz) = nullptr;
  // ref::attention at every position t of one sequence, for one key/value head and its `group`
  // query heads: query t of head h (q + t * q_stride + h * head_dim) reads the keys and values
  // of rows [0, t] (k and v, rows kv_stride apart); its output goes to out + t * out_stride +
  // h * head_dim. scratch holds attention_sequence_scratch(T, head_dim) floats.
  void (*attention_sequence)(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride,
                             int64_t T, int32_t group, int32_t head_dim, float scale, float* out,
                             int64_t out_stride, float* scratch) = nullptr;
  int64_t (*attention_sequence_scratch)(int64_t T, int32_t head_dim) = nullptr;
  // ref::attention_backward for one sequence and one key/value head. scratch holds
  // attention_backward_scratch(T, group, head_dim) floats.
  void (*attention_backward)(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride,
                             const float* dout, int64_t dout_stride, float* dq, int64_t dq_stride, float* dk,
                             float* dv, int64_t dkv_stride, int64_t T, int32_t group, int32_t head_dim, float scale,
                             float* scratch) = nullptr;
  int64_t (*attention_backward_scratch)(int64_t T, int32_t group, int32_t head_dim) = nullptr;

  // ---- the optimizer (twins in kernels/ref/optimizer.hpp) ----

  // ref::adamw_update.
  void (*adamw_update)(const ref::AdamWScalars& s, float grad_scale, const float* grad, const float* p,
                       const float* m, const float* v, float* p_out, float* m_out, float* v_out,
                       int64_t n) = nullptr;
  // ref::ema_update.
  void (*ema_update)(double decay, const float* ema, const float* p, float* ema_out, int64_t n) = nullptr;
  // The block sums of ref::block_sum_of_squares for blocks [b_begin, b_end) of g [n], into
  // sums[0, b_end - b_begin); adding them in increasing block order from +0 gives its result.
  void (*block_sums_of_squares)(const float* g, int64_t n, int64_t b_begin, int64_t b_end, double* sums) = nullptr;
};

// Packs w [K, N] (row stride ldw) for `kernels`' matmul; with bf16_storage the values are
// rounded to bf16 (ref::round_bf16, which leaves bf16 values as they are) and stored as their
// high 16 bits.
PackedMatrix pack_matrix(const Kernels& kernels, const float* w, int64_t K, int64_t N, int64_t ldw,
                         bool bf16_storage = false);
// Packs the column-wise concatenation [w0 | w1 | ...] of matrices that share K.
struct MatrixPart {
  const float* w;  // [K, N] row-major
  int64_t N;
};
// With `arena`, the panels are taken from it (a model's matrices in one block: pack_weights,
// model/packed_weights.hpp).
class WeightArena;
PackedMatrix pack_concat(const Kernels& kernels, const MatrixPart* parts, int n_parts, int64_t K,
                         bool bf16_storage = false, WeightArena* arena = nullptr);

// Packs the column-wise concatenation of q8 matrices that share K (q [K, N] int8 row-major,
// scale [N]) as stored int8 panels (PackedMatrix::q8): the matmul gives the bits of the same
// matmul over the expanded weights float(q) * scale.
struct Q8Part {
  const int8_t* q;     // [K, N] row-major
  const float* scale;  // [N]
  int64_t N;
};
PackedMatrix pack_q8_concat(const Kernels& kernels, const Q8Part* parts, int n_parts, int64_t K,
                            WeightArena* arena = nullptr);
// The same for q4 matrices (packed [K, ceil(N / 2)] as quant/q4.hpp, scale [ceil(K / 32), N]).
struct Q4Part {
  const uint8_t* packed;
  const float* scale;
  int64_t N;
};
PackedMatrix pack_q4_concat(const Kernels& kernels, const Q4Part* parts, int n_parts, int64_t K,
                            WeightArena* arena = nullptr);

// Storage for a packed [K, N] matrix (columns past N zeroed), to be filled by the functions below;
// the training step repacks into it every step.
PackedMatrix allocate_packed(const Kernels& kernels, int64_t K, int64_t N);
// Fills panels [p0, p1) of `out` ([K, sum N_i]) from the concatenation of parts, each value
// rounded to bf16 when asked.
void pack_panels(const MatrixPart* parts, int n_parts, PackedMatrix& out, int64_t p0, int64_t p1, bool bf16);
// Rows [r_begin, r_end) of x [K, N] (row stride N) into the panels of a packed [K, N] whose
// storage is `data` with panel width NR: row r's columns [p NR, p NR + NR) go to
// data[(p K + r) NR ...]; columns past N are left as they are (the matmul discards their
// outputs). The rows' owner packs them while they are in its cache (training's dy, as each
// worker produces its rows).
void pack_rows(const float* x, int64_t N, int64_t r_begin, int64_t r_end, float* data, int64_t K, int32_t NR);
// Fills panels [p0, p1) of `out` ([sum N_i, K]) with the transpose of the concatenation of parts
// ([K, N_i] each), rounded to bf16 when asked: the layout of W^T for dx = dy @ W^T.
void pack_transposed_panels(const MatrixPart* parts, int n_parts, PackedMatrix& out, int64_t p0, int64_t p1, bool bf16);

}  // namespace lockstep::simd
