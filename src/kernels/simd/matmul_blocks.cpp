// The integer matmul of the profile lockstep-int8dot-1 (ref::matmul_blocks_quantized's twin):
// y [M, N] from activations quantized per block of 32 (qx, dx: ref::quantize_activations) and a
// BlockMatrix. A group's kBlockGroup outputs sit in the lanes of one f32 accumulator vector; for
// each block b in increasing order the kernel forms every output's integer block sum in its lane
// (exact: any lane split and any order of integer adds give the same int32), converts it (exact),
// and runs acc = fma(float(isum), dw * dx, acc): one chain per output in block order, as the
// reference. Rows go in tiles of up to kBlockRows sharing each group's weight loads (prefill);
// one row (decoding) is a tile of one. Threads split the groups.
//
// Highway 1.0.3 has no int8 dot product, so each target uses its own intrinsics inside Highway's
// per-target code: x86 AVX2's maddubs (AVX2 and AVX-512 targets), and on the AVX-512 targets
// AVX-512 VNNI's vpdpbusd where the CPU has it; Arm NEON's sdot where the CPU has the dot product
// (Armv8.2 dotprod), else widening multiplies (vmull_s8, vpadalq_s16); SVE's sdot at any vector
// length (SVE, SVE2, SVE_256, SVE2_128). The portable baseline runs the scalar loops, which
// compute the same integers. Kernels::matmul_blocks_kernel names the choice (tests check it).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/matmul_blocks.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/ref/blocks.hpp"
#include "kernels/ref/math.hpp"
#include "kernels/simd/block_matrix.hpp"
#include "kernels/simd/kernels.hpp"

#if HWY_ARCH_X86
#include <immintrin.h>
#elif HWY_ARCH_ARM_A64
#include <arm_neon.h>
#include <sys/auxv.h>  // getauxval, HWCAP_ASIMDDP
#endif

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {

using quant::kBlockValues;

// Outputs of groups [g_begin, g_end) one at a time with scalar integer sums: the portable kernel,
// and every table's `matmul_blocks_scalar` (the same chain, the same integers).
void MatmulBlocksScalar(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin,
                        int64_t g_end, float* y, int64_t ldy) {
  const int64_t B = w.blocks, K = w.K;
  for (int64_t g = g_begin; g < g_end; ++g) {
    const int cols = static_cast<int>(std::min<int64_t>(kBlockGroup, w.N - g * kBlockGroup));
    for (int64_t m = 0; m < M; ++m) {
      for (int j = 0; j < cols; ++j) {
        float acc = 0.0f;
        for (int64_t b = 0; b < B; ++b) {
          const int8_t* x = qx + m * K + b * kBlockValues;
          const float xs = dx[m * B + b];
          if (w.k_quants) {  // low and high halves' sums, then the block's two steps by its form
            int32_t low = 0, high = 0, xsum = 0;
            for (int k = 0; k < kBlockValues / 2; ++k) low += w.value(g, b, j, k) * x[k];
            for (int k = kBlockValues / 2; k < kBlockValues; ++k) high += w.value(g, b, j, k) * x[k];
            for (int k = 0; k < kBlockValues; ++k) xsum += x[k];
            const bool minus_min = w.minus_min(g, b, j);
            acc = ref::fma_f32(static_cast<float>(minus_min ? low + high : low), w.c1(g, b, j) * xs, acc);
            acc = ref::fma_f32(static_cast<float>(minus_min ? xsum : high), w.c2(g, b, j) * xs, acc);
            continue;
          }
          int32_t isum = 0;
          for (int k = 0; k < kBlockValues; ++k) isum += w.value(g, b, j, k) * x[k];
          const float s = w.scale(g, b, j) * xs;
          acc = ref::fma_f32(static_cast<float>(isum), s, acc);
        }
        y[m * ldy + g * kBlockGroup + j] = acc;
      }
    }
  }
}

// sums[i] = the sum of the 32 values of block i of qx, for blocks [0, n).
HWY_INLINE void BlockSums(const int8_t* HWY_RESTRICT qx, int64_t n, int32_t* HWY_RESTRICT sums) {
  for (int64_t i = 0; i < n; ++i) {
    int32_t sum = 0;
    for (int j = 0; j < kBlockValues; ++j) sum += qx[i * kBlockValues + j];
    sums[i] = sum;
  }
}

// Each of rows [0, M)'s block sums of x (xsum[m * blocks + b], integers), once per call, in a
// buffer of the calling thread's: what Q4_0's nibbles and the K-quants' steps take off or add.
HWY_INLINE const int32_t* RowBlockSums(const int8_t* qx, int64_t M, int64_t blocks) {
  thread_local std::vector<int32_t> xsum;
  xsum.resize(static_cast<size_t>(M * blocks));
  BlockSums(qx, M * blocks, xsum.data());
  return xsum.data();
}

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL

constexpr int kBlockRows = 4;  // rows sharing a group's weight loads

// The records of a tile's G groups, for a matrix of nibbles (Q4_0) or of int8: group gi's record
// of block b at rec[gi] + b * kBytes, its kInts integer bytes, then its 8 f16 scales. The layout
// known at compile time leaves the loops pointer steps (BlockMatrix's accessors, the twin's).
template <bool kNibbles, int G>
struct Records {
  static constexpr int64_t kInts = kNibbles ? 128 : 256;
  static constexpr int64_t kBytes = kInts + 2 * kBlockGroup;
  const uint8_t* rec[G];
  Records(const BlockMatrix& w, int64_t g) {
    for (int gi = 0; gi < G; ++gi) rec[gi] = w.data.data() + (g + gi) * w.blocks * kBytes;
  }
  const uint8_t* ints(int gi, int64_t b) const { return rec[gi] + b * kBytes; }
  const uint8_t* scales(int gi, int64_t b) const { return rec[gi] + b * kBytes + kInts; }
};

// Quad-interleaved vector v of a block's int8 integers.
HWY_INLINE __m256i LoadQuads(const uint8_t* ints, int v) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ints + v * 32));
}

// Stores the 8 outputs of a group (only the first `cols`).
HWY_INLINE void StoreGroup(float* out, __m256 acc, int64_t cols) {
  if (cols == kBlockGroup) {
    _mm256_storeu_ps(out, acc);
    return;
  }
  alignas(32) float lanes[kBlockGroup];
  _mm256_store_ps(lanes, acc);
  std::memcpy(out, lanes, static_cast<size_t>(cols) * sizeof(float));
}

// The step of block b for rows [m0, m0 + R) of a group whose block scales are at `scales`:
// s = dw * dx (one rounding), acc = fma(float(isum), s, acc) (the conversion exact, |isum| < 2^24).
template <int R>
HWY_INLINE void ChainStep(const __m256i* isum, const uint8_t* scales, const float* dxb, int64_t blocks, __m256* acc) {
  const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));  // exact
  for (int r = 0; r < R; ++r) {
    const __m256 s = _mm256_mul_ps(dw, _mm256_set1_ps(dxb[r * blocks]));
    acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), s, acc[r]);
  }
}

template <int R>
HWY_INLINE void StoreRows(const __m256* acc, const BlockMatrix& w, int64_t g, int64_t m0, float* y, int64_t ldy) {
  const int64_t col0 = g * kBlockGroup, cols = std::min<int64_t>(kBlockGroup, w.N - col0);
  for (int r = 0; r < R; ++r) StoreGroup(y + (m0 + r) * ldy + col0, acc[r], cols);
}

// Activation quad v of a row's block (qb: the block's 32 values), broadcast to every lane.
HWY_INLINE __m256i Quad(const int8_t* qb, int v) {
  int32_t quad;
  std::memcpy(&quad, qb + v * 4, 4);
  return _mm256_set1_epi32(quad);
}

// Activation quad v of rows qb + r * K, r in [0, R), each broadcast.
template <int R>
HWY_INLINE void RowQuads(const int8_t* qb, int64_t K, int v, __m256i (&xq)[R]) {
  for (int r = 0; r < R; ++r) xq[r] = Quad(qb + r * K, v);
}

// Chunk c of a record of nibbles as its two quad vectors, each value 0-15: the low nibbles (vector
// 2c) and the high ones (2c + 1).
HWY_INLINE void NibbleQuads(const uint8_t* ints, int c, __m256i& even, __m256i& odd) {
  const __m256i low = _mm256_set1_epi8(15), chunk = LoadQuads(ints, c);
  even = _mm256_and_si256(chunk, low);
  odd = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), low);
}

// A tile of R rows and G groups. Decoding (R = 1) takes two groups at once with each block's sum
// in two chains (even and odd quads), so that four independent integer chains and two streams of
// records are in flight (one group's eight dependent dot products a block left the core waiting
// on each); prefill's tiles of 4 rows share each weight load four times and need no more.
template <int R, int G>
struct TileShape {
  static constexpr int kChains = R * G >= 4 ? 1 : 2;  // integer chains per (row, group) and block
};

// Decoding reads each record once: ask L2 for the records kPrefetchAhead blocks on of each of the
// tile's groups (past a group's last block that is the next group's first: still a record).
constexpr int64_t kPrefetchAhead = 32;
template <int R, bool kNibbles, int G>
HWY_INLINE void PrefetchAhead(const Records<kNibbles, G>& at, int64_t b) {
  if constexpr (R < 4) {
    for (int gi = 0; gi < G; ++gi) {
      const char* p = reinterpret_cast<const char*>(at.ints(gi, b + kPrefetchAhead));
      for (int64_t line = 0; line < Records<kNibbles, G>::kBytes; line += 64) _mm_prefetch(p + line, _MM_HINT_T1);
    }
  }
}

// Adds the chains of each (group, row) into isum [G][R][0] and runs the block's chain step.
template <int R, bool kNibbles, int G, int C>
HWY_INLINE void FinishBlock(__m256i (&isum)[G][R][C], const Records<kNibbles, G>& at, int64_t b, const float* dxb,
                            int64_t blocks, __m256 (&acc)[G][R]) {
  for (int gi = 0; gi < G; ++gi) {
    __m256i sum[R];
    for (int r = 0; r < R; ++r) {
      sum[r] = isum[gi][r][0];
      for (int c = 1; c < C; ++c) sum[r] = _mm256_add_epi32(sum[r], isum[gi][r][c]);
    }
    ChainStep<R>(sum, at.scales(gi, b), dxb, blocks, acc[gi]);
  }
}

// Rows [m0, m0 + R) of groups [g, g + G). For each block and each quad v, lane j of the int32 sum
// gets output j's four products with the broadcast activation quad. maddubs multiplies an unsigned
// byte by a signed one and adds pairs with int16 saturation, which no operand here reaches:
// - int8 weights: it gets |w| (128 for -128, exact as unsigned) and x with w's sign (|x| <= 127,
//   so negating never overflows), whose pair sums stay within 2 * 128 * 127 = 32512; madd with
//   ones adds the pairs into int32, quad by quad.
// - Q4_0's nibbles (w + 8, unsigned as they are) against x: pair sums within 2 * 15 * 127 = 3810,
//   so the 8 quads' pair sums add up in int16 (at most 30480) before one madd with ones; each lane
//   then holds isum + 8 * sum(x), and `xsum` (the block's sum of x, per row) takes 8 * sum(x) off.
// After the 8 quads lane j holds isum[j] exactly (its chains added: integers, any split).
template <int R, int G, bool kNibbles>
HWY_INLINE void GroupRows(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w, int64_t g, float* y,
                          int64_t ldy, const int32_t* xsum) {
  constexpr int C = TileShape<R, G>::kChains;
  const Records<kNibbles, G> at(w, g);
  const int64_t K = w.K, blocks = w.blocks;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[G][R];
  for (auto& a : acc)
    for (__m256& v : a) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    PrefetchAhead<R>(at, b);
    const int8_t* qb = qx + m0 * K + b * kBlockValues;  // row r's block at qb + r * K
    __m256i isum[G][R][C];
    for (auto& a : isum)
      for (auto& r : a)
        for (__m256i& v : r) v = _mm256_setzero_si256();
    if constexpr (kNibbles) {
      for (int c = 0; c < 4; ++c) {  // int16 pair sums in isum, widened after the block
        __m256i even_x[R], odd_x[R];
        RowQuads(qb, K, 2 * c, even_x);
        RowQuads(qb, K, 2 * c + 1, odd_x);
        for (int gi = 0; gi < G; ++gi) {
          __m256i even, odd;
          NibbleQuads(at.ints(gi, b), c, even, odd);
          for (int r = 0; r < R; ++r) {
            isum[gi][r][0] = _mm256_add_epi16(isum[gi][r][0], _mm256_maddubs_epi16(even, even_x[r]));
            isum[gi][r][C - 1] = _mm256_add_epi16(isum[gi][r][C - 1], _mm256_maddubs_epi16(odd, odd_x[r]));
          }
        }
      }
      for (int gi = 0; gi < G; ++gi)
        for (int r = 0; r < R; ++r) {
          __m256i pairs = isum[gi][r][0];
          for (int c = 1; c < C; ++c) pairs = _mm256_add_epi16(pairs, isum[gi][r][c]);
          isum[gi][r][0] = _mm256_sub_epi32(_mm256_madd_epi16(pairs, ones),
                                            _mm256_set1_epi32(8 * xsum[(m0 + r) * blocks + b]));
          for (int c = 1; c < C; ++c) isum[gi][r][c] = _mm256_setzero_si256();
        }
    } else {
      for (int v = 0; v < 8; ++v) {
        __m256i xq[R];
        RowQuads(qb, K, v, xq);
        for (int gi = 0; gi < G; ++gi) {
          const __m256i wv = LoadQuads(at.ints(gi, b), v);
          const __m256i aw = _mm256_abs_epi8(wv);
          for (int r = 0; r < R; ++r) {
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[r], wv)), ones);
            isum[gi][r][v % C] = _mm256_add_epi32(isum[gi][r][v % C], p);
          }
        }
      }
    }
    FinishBlock<R>(isum, at, b, dx + m0 * blocks + b, blocks, acc);
  }
  for (int gi = 0; gi < G; ++gi) StoreRows<R>(acc[gi], w, g + gi, m0, y, ldy);
}

// The records of a K-quant matrix's G groups (BlockMatrix::k_quants): super-records of a header
// (d1 [8], d2 [8] f16, mask [8] int8) and 8 records of kInts integer bytes and s1 [8], s2 [8] int8.
template <bool kNibbles, int G>
struct KRecords {
  static constexpr int64_t kInts = kNibbles ? 128 : 256;
  static constexpr int64_t kRecord = kInts + 2 * kBlockGroup;
  static constexpr int64_t kSuper = BlockMatrix::kKHeaderBytes + 8 * kRecord;
  const uint8_t* rec[G];
  KRecords(const BlockMatrix& w, int64_t g) {
    for (int gi = 0; gi < G; ++gi) rec[gi] = w.data.data() + (g + gi) * (w.blocks / 8) * kSuper;
  }
  const uint8_t* header(int gi, int64_t b) const { return rec[gi] + (b >> 3) * kSuper; }
  const uint8_t* ints(int gi, int64_t b) const { return header(gi, b) + BlockMatrix::kKHeaderBytes + (b & 7) * kRecord; }
  const uint8_t* scales(int gi, int64_t b) const { return ints(gi, b) + kInts; }
};

// The 8 lanes' coefficients f32(d) ⊗ float(s), from 8 f16 (exact) and 8 int8 (exact): exact.
HWY_INLINE __m256 KCoefficients(__m256 d, const uint8_t* s) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s));
  return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)));
}

// Decoding reads each K-quant record once: ask L2 for the records kPrefetchAhead blocks on (and
// their super-block's header where one starts). Past a group's last block that is a record of the
// groups after it, as PrefetchAhead's (a prefetch past the matrix's end is dropped by the CPU):
// clamping to the group's last block, as this first did, left the decoding of an l768 matrix (24
// blocks) without any prefetch and halved its one-thread speed.
template <int R, bool kNibbles, int G>
HWY_INLINE void PrefetchAheadK(const KRecords<kNibbles, G>& at, int64_t b) {
  if constexpr (R < 4) {
    for (int gi = 0; gi < G; ++gi) {
      const char* p = reinterpret_cast<const char*>(at.ints(gi, b + kPrefetchAhead));
      for (int64_t line = 0; line < KRecords<kNibbles, G>::kRecord; line += 64) _mm_prefetch(p + line, _MM_HINT_T1);
      if (((b + kPrefetchAhead) & 7) == 0) _mm_prefetch(p - BlockMatrix::kKHeaderBytes, _MM_HINT_T1);
    }
  }
}

// The super-scales and forms of each group's super-block, where block b starts one.
template <bool kNibbles, int G>
HWY_INLINE void LoadKHeaders(const KRecords<kNibbles, G>& at, int64_t b, __m256 (&d1)[G], __m256 (&d2)[G],
                             __m256i (&mask)[G]) {
  if ((b & 7) != 0) return;
  for (int gi = 0; gi < G; ++gi) {
    const uint8_t* h = at.header(gi, b);
    d1[gi] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));  // exact
    d2[gi] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 2 * kBlockGroup)));
    mask[gi] = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(h + 4 * kBlockGroup)));
  }
}

// Block b's two steps for rows [m0, m0 + R) of each group, from the exact half sums `half`:
// i1 = low + (high & mask), i2 = mask ? xsum : high (the block's sum of x, per row);
// c1 = f32(d1) ⊗ s1 and c2 = f32(d2) ⊗ s2 (exact);
// acc = fma(float(i1), c1 * dx, acc); acc = fma(float(i2), c2 * dx, acc).
template <int R, bool kNibbles, int G>
HWY_INLINE void KChainSteps(const __m256i (&half)[G][R][2], const KRecords<kNibbles, G>& at, int64_t b,
                            const __m256 (&d1)[G], const __m256 (&d2)[G], const __m256i (&mask)[G], const float* dxb,
                            const int32_t* xsum, int64_t blocks, __m256 (&acc)[G][R]) {
  for (int gi = 0; gi < G; ++gi) {
    const uint8_t* s = at.scales(gi, b);
    const __m256 c1 = KCoefficients(d1[gi], s), c2 = KCoefficients(d2[gi], s + kBlockGroup);
    for (int r = 0; r < R; ++r) {
      const __m256i lo = half[gi][r][0], hi = half[gi][r][1];
      const __m256i i1 = _mm256_add_epi32(lo, _mm256_and_si256(hi, mask[gi]));
      const __m256i i2 = _mm256_blendv_epi8(hi, _mm256_set1_epi32(xsum[r * blocks]), mask[gi]);
      const __m256 x_scale = _mm256_set1_ps(dxb[r * blocks]);
      acc[gi][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i1), _mm256_mul_ps(c1, x_scale), acc[gi][r]);
      acc[gi][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i2), _mm256_mul_ps(c2, x_scale), acc[gi][r]);
    }
  }
}

// A matrix of K-quants: each output's sum of quads 0-3 (inputs 0-15) in `low` and of quads 4-7 in
// `high`, exact integers, then KChainSteps:
// - int8 weights (Q6_K's q - 32 in [-32, 31], Q5_K's q in [0, 31], a mix) as GroupRows takes
//   them: maddubs(|w|, x with w's sign), pair sums within 2 * 32 * 127, madd with ones;
// - Q4_K's nibbles (q in [0, 15], no offset) into maddubs as they are against x: pair sums within
//   2 * 15 * 127, two chunks' (four quads') pair sums added in int16 (at most 15240), one madd.
template <int R, int G, bool kNibbles>
HWY_INLINE void GroupRowsK(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w, int64_t g, float* y,
                           int64_t ldy, const int32_t* xsum) {
  const KRecords<kNibbles, G> at(w, g);
  const int64_t K = w.K, blocks = w.blocks;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[G][R];
  for (auto& a : acc)
    for (__m256& v : a) v = _mm256_setzero_ps();
  __m256 d1[G] = {}, d2[G] = {};  // set at b = 0 (LoadKHeaders)
  __m256i mask[G] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    PrefetchAheadK<R>(at, b);
    LoadKHeaders(at, b, d1, d2, mask);
    const int8_t* qb = qx + m0 * K + b * kBlockValues;  // row r's block at qb + r * K
    __m256i half[G][R][2];
    for (auto& a : half)
      for (auto& r : a) r[0] = r[1] = _mm256_setzero_si256();
    if constexpr (kNibbles) {
      for (int c = 0; c < 4; ++c) {  // chunk c: quads 2c (low nibbles) and 2c + 1 (high)
        __m256i even_x[R], odd_x[R];
        RowQuads(qb, K, 2 * c, even_x);
        RowQuads(qb, K, 2 * c + 1, odd_x);
        for (int gi = 0; gi < G; ++gi) {
          __m256i even, odd;
          NibbleQuads(at.ints(gi, b), c, even, odd);
          for (int r = 0; r < R; ++r) {
            const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(even, even_x[r]), _mm256_maddubs_epi16(odd, odd_x[r]));
            half[gi][r][c / 2] = _mm256_add_epi16(half[gi][r][c / 2], pairs);
          }
        }
      }
      for (auto& a : half)
        for (auto& r : a) r[0] = _mm256_madd_epi16(r[0], ones), r[1] = _mm256_madd_epi16(r[1], ones);
    } else {
      for (int v = 0; v < 8; ++v) {
        __m256i xq[R];
        RowQuads(qb, K, v, xq);
        for (int gi = 0; gi < G; ++gi) {
          const __m256i wv = LoadQuads(at.ints(gi, b), v);
          const __m256i aw = _mm256_abs_epi8(wv);
          for (int r = 0; r < R; ++r) {
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[r], wv)), ones);
            half[gi][r][v / 4] = _mm256_add_epi32(half[gi][r][v / 4], p);
          }
        }
      }
    }
    KChainSteps<R>(half, at, b, d1, d2, mask, dx + m0 * blocks + b, xsum + m0 * blocks + b, blocks, acc);
  }
  for (int gi = 0; gi < G; ++gi) StoreRows<R>(acc[gi], w, g + gi, m0, y, ldy);
}

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
constexpr bool kHasVnni = true;
// AVX-512 VNNI's vpdpbusd (on 256-bit vectors) adds four u8 x s8 products into each int32 lane
// without saturating. int8 weights: it gets x + 128 (unsigned, from `xu`) and w, and the block's
// sum of w (vpdpbusd with ones) times 128 is taken back off. Q4_0's nibbles are unsigned already
// (w + 8): it gets them as they are and x, so each lane holds isum + 8 * sum(x), and `xsum` (the
// block's sum of x, per row) takes 8 * sum(x) back off. Integers throughout: the same isum. Used
// where the CPU has the instruction (checked when the table is filled); the tests compare its bits
// with the others'.
template <int R, int G, bool kNibbles>
__attribute__((target("avx512vl,avx512vnni"))) inline void GroupRowsVnni(const int8_t* qx, const float* dx, int64_t m0,
                                                                          const BlockMatrix& w, int64_t g, float* y,
                                                                          int64_t ldy, const int32_t* xsum,
                                                                          const int8_t* xu) {
  constexpr int C = TileShape<R, G>::kChains;
  const Records<kNibbles, G> at(w, g);
  const int64_t K = w.K, blocks = w.blocks;
  __m256 acc[G][R];
  for (auto& a : acc)
    for (__m256& v : a) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    PrefetchAhead<R>(at, b);
    __m256i isum[G][R][C];
    for (auto& a : isum)
      for (auto& r : a)
        for (__m256i& v : r) v = _mm256_setzero_si256();
    if constexpr (kNibbles) {
      const int8_t* qb = qx + m0 * K + b * kBlockValues;  // row r's block at qb + r * K
      for (int c = 0; c < 4; ++c) {
        __m256i even_x[R], odd_x[R];
        RowQuads(qb, K, 2 * c, even_x);
        RowQuads(qb, K, 2 * c + 1, odd_x);
        for (int gi = 0; gi < G; ++gi) {
          __m256i even, odd;
          NibbleQuads(at.ints(gi, b), c, even, odd);
          for (int r = 0; r < R; ++r) {
            isum[gi][r][0] = _mm256_dpbusd_epi32(isum[gi][r][0], even, even_x[r]);
            isum[gi][r][C - 1] = _mm256_dpbusd_epi32(isum[gi][r][C - 1], odd, odd_x[r]);
          }
        }
      }
      for (int gi = 0; gi < G; ++gi)
        for (int r = 0; r < R; ++r)
          isum[gi][r][0] = _mm256_sub_epi32(isum[gi][r][0], _mm256_set1_epi32(8 * xsum[(m0 + r) * blocks + b]));
    } else {
      const int8_t* ub = xu + m0 * K + b * kBlockValues;  // row r's x + 128 at ub + r * K
      const __m256i ones = _mm256_set1_epi8(1);
      __m256i wsum[G][C];
      for (auto& a : wsum)
        for (__m256i& v : a) v = _mm256_setzero_si256();
      for (int v = 0; v < 8; ++v) {
        __m256i xq[R];
        RowQuads(ub, K, v, xq);
        for (int gi = 0; gi < G; ++gi) {
          const __m256i wv = LoadQuads(at.ints(gi, b), v);
          wsum[gi][v % C] = _mm256_dpbusd_epi32(wsum[gi][v % C], ones, wv);
          for (int r = 0; r < R; ++r) isum[gi][r][v % C] = _mm256_dpbusd_epi32(isum[gi][r][v % C], xq[r], wv);
        }
      }
      for (int gi = 0; gi < G; ++gi) {
        __m256i ws = wsum[gi][0];
        for (int c = 1; c < C; ++c) ws = _mm256_add_epi32(ws, wsum[gi][c]);
        ws = _mm256_slli_epi32(ws, 7);
        for (int r = 0; r < R; ++r) isum[gi][r][0] = _mm256_sub_epi32(isum[gi][r][0], ws);
      }
    }
    FinishBlock<R>(isum, at, b, dx + m0 * blocks + b, blocks, acc);
  }
  for (int gi = 0; gi < G; ++gi) StoreRows<R>(acc[gi], w, g + gi, m0, y, ldy);
}

// K-quants with vpdpbusd: Q4_K's unsigned nibbles against x as they are; int8 weights against
// x + 128 (from `xu`), less 128 times each half's sum of w (vpdpbusd with ones). The same exact
// half sums as GroupRowsK, then the same steps.
template <int R, int G, bool kNibbles>
__attribute__((target("avx512vl,avx512vnni"))) inline void GroupRowsKVnni(const int8_t* qx, const float* dx,
                                                                           int64_t m0, const BlockMatrix& w, int64_t g,
                                                                           float* y, int64_t ldy, const int32_t* xsum,
                                                                           const int8_t* xu) {
  const KRecords<kNibbles, G> at(w, g);
  const int64_t K = w.K, blocks = w.blocks;
  __m256 acc[G][R];
  for (auto& a : acc)
    for (__m256& v : a) v = _mm256_setzero_ps();
  __m256 d1[G] = {}, d2[G] = {};  // set at b = 0 (LoadKHeaders)
  __m256i mask[G] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    PrefetchAheadK<R>(at, b);
    LoadKHeaders(at, b, d1, d2, mask);
    __m256i half[G][R][2];
    for (auto& a : half)
      for (auto& r : a) r[0] = r[1] = _mm256_setzero_si256();
    if constexpr (kNibbles) {
      const int8_t* qb = qx + m0 * K + b * kBlockValues;  // row r's block at qb + r * K
      for (int c = 0; c < 4; ++c) {
        __m256i even_x[R], odd_x[R];
        RowQuads(qb, K, 2 * c, even_x);
        RowQuads(qb, K, 2 * c + 1, odd_x);
        for (int gi = 0; gi < G; ++gi) {
          __m256i even, odd;
          NibbleQuads(at.ints(gi, b), c, even, odd);
          for (int r = 0; r < R; ++r) {
            half[gi][r][c / 2] = _mm256_dpbusd_epi32(half[gi][r][c / 2], even, even_x[r]);
            half[gi][r][c / 2] = _mm256_dpbusd_epi32(half[gi][r][c / 2], odd, odd_x[r]);
          }
        }
      }
    } else {
      const int8_t* ub = xu + m0 * K + b * kBlockValues;  // row r's x + 128 at ub + r * K
      const __m256i ones = _mm256_set1_epi8(1);
      __m256i wsum[G][2];
      for (auto& a : wsum) a[0] = a[1] = _mm256_setzero_si256();
      for (int v = 0; v < 8; ++v) {
        __m256i xq[R];
        RowQuads(ub, K, v, xq);
        for (int gi = 0; gi < G; ++gi) {
          const __m256i wv = LoadQuads(at.ints(gi, b), v);
          wsum[gi][v / 4] = _mm256_dpbusd_epi32(wsum[gi][v / 4], ones, wv);
          for (int r = 0; r < R; ++r) half[gi][r][v / 4] = _mm256_dpbusd_epi32(half[gi][r][v / 4], xq[r], wv);
        }
      }
      for (int gi = 0; gi < G; ++gi)
        for (int h = 0; h < 2; ++h) {
          const __m256i ws = _mm256_slli_epi32(wsum[gi][h], 7);
          for (int r = 0; r < R; ++r) half[gi][r][h] = _mm256_sub_epi32(half[gi][r][h], ws);
        }
    }
    KChainSteps<R>(half, at, b, d1, d2, mask, dx + m0 * blocks + b, xsum + m0 * blocks + b, blocks, acc);
  }
  for (int gi = 0; gi < G; ++gi) StoreRows<R>(acc[gi], w, g + gi, m0, y, ldy);
}
#else
constexpr bool kHasVnni = false;
template <int R, int G, bool kNibbles>
void GroupRowsVnni(const int8_t*, const float*, int64_t, const BlockMatrix&, int64_t, float*, int64_t, const int32_t*,
                   const int8_t*) {}
template <int R, int G, bool kNibbles>
void GroupRowsKVnni(const int8_t*, const float*, int64_t, const BlockMatrix&, int64_t, float*, int64_t, const int32_t*,
                    const int8_t*) {}
#endif

// out[i] = qx[i] + 128 as a byte (the sign bit flipped), for [0, n).
HWY_INLINE void FlipSignBits(const int8_t* HWY_RESTRICT qx, int64_t n, int8_t* HWY_RESTRICT out) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int8_t>(qx[i] ^ -128);
}

// Groups [g_begin, g_end), rows in tiles of kBlockRows and a last smaller one.
template <bool kVnni>
void MatmulBlocksOf(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                    float* y, int64_t ldy) {
  // Over nibbles and K-quants: each row's block sums of x. BlockSums and FlipSignBits write
  // through plain restrict pointers: indexing the thread_local vectors, an int8 store may alias
  // the vector's own pointer, so GCC reloaded it (and the TLS address) a byte at a time;
  // vectorized, the l768 Q8_0 prefill's 16 items on 2 threads no longer spend 19% of their time here.
  const int32_t* xsum = w.nibbles || w.k_quants ? RowBlockSums(qx, M, w.blocks) : nullptr;
  // VNNI over int8 weights: the activations as x + 128 (flipping the sign bit), once per call.
  thread_local std::vector<int8_t> xu;
  if (kVnni && !w.nibbles) {
    xu.resize(static_cast<size_t>(M * w.K));
    FlipSignBits(qx, M * w.K, xu.data());
  }
  auto tile = [&]<int R, int G>(int64_t m, int64_t g) {
    if (w.k_quants) {
      if constexpr (kVnni) {
        if (w.nibbles) {
          GroupRowsKVnni<R, G, true>(qx, dx, m, w, g, y, ldy, xsum, xu.data());
        } else {
          GroupRowsKVnni<R, G, false>(qx, dx, m, w, g, y, ldy, xsum, xu.data());
        }
      } else if (w.nibbles) {
        GroupRowsK<R, G, true>(qx, dx, m, w, g, y, ldy, xsum);
      } else {
        GroupRowsK<R, G, false>(qx, dx, m, w, g, y, ldy, xsum);
      }
    } else if constexpr (kVnni) {
      if (w.nibbles) {
        GroupRowsVnni<R, G, true>(qx, dx, m, w, g, y, ldy, xsum, xu.data());
      } else {
        GroupRowsVnni<R, G, false>(qx, dx, m, w, g, y, ldy, xsum, xu.data());
      }
    } else if (w.nibbles) {
      GroupRows<R, G, true>(qx, dx, m, w, g, y, ldy, xsum);
    } else {
      GroupRows<R, G, false>(qx, dx, m, w, g, y, ldy, xsum);
    }
  };
  // Groups outermost, so that a group's records (K / 32 of them, a few KiB) stay in L1 while every
  // row tile reads them; rows of a last tile of fewer than kBlockRows take two groups at once.
  const int64_t tail = M % kBlockRows, full = M - tail;
  auto groups = [&]<int G>(int64_t g) {
    for (int64_t m = 0; m < full; m += kBlockRows) {
      if constexpr (kVnni) {  // 32 vector registers: 4 rows of 2 groups share each broadcast
        tile.template operator()<kBlockRows, G>(m, g);
      } else {
        for (int gi = 0; gi < G; ++gi) tile.template operator()<kBlockRows, 1>(m, g + gi);
      }
    }
    switch (tail) {
      case 3: tile.template operator()<3, G>(full, g); break;
      case 2: tile.template operator()<2, G>(full, g); break;
      case 1: tile.template operator()<1, G>(full, g); break;
      default: break;
    }
  };
  int64_t g = g_begin;
  for (; g + 2 <= g_end; g += 2) groups.template operator()<2>(g);
  if (g < g_end) groups.template operator()<1>(g);
}

void MatmulBlocks(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                  float* y, int64_t ldy) {
  MatmulBlocksOf<false>(qx, dx, M, w, g_begin, g_end, y, ldy);
}
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
void MatmulBlocksVnni(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin,
                      int64_t g_end, float* y, int64_t ldy) {
  MatmulBlocksOf<kHasVnni>(qx, dx, M, w, g_begin, g_end, y, ldy);
}
#endif

#elif HWY_ARCH_ARM_A64 && (HWY_TARGET == HWY_NEON || HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || \
                            HWY_TARGET == HWY_SVE_256 || HWY_TARGET == HWY_SVE2_128)

constexpr int kBlockRows = 4;  // rows sharing a group's weight loads

// Rows [0, M) in tiles of kBlockRows and a last smaller one: tile.template operator()<R>(m0).
template <class Tile>
HWY_INLINE void RowTiles(int64_t M, const Tile& tile) {
  int64_t m = 0;
  for (; m + kBlockRows <= M; m += kBlockRows) tile.template operator()<kBlockRows>(m);
  switch (M - m) {
    case 3: tile.template operator()<3>(m); break;
    case 2: tile.template operator()<2>(m); break;
    case 1: tile.template operator()<1>(m); break;
    default: break;
  }
}

#if HWY_TARGET == HWY_NEON
// NEON: a group's 8 outputs in two int32x4 / float32x4 halves (outputs 0-3, 4-7); vector v's 32
// bytes are two int8x16, the first holding outputs 0-3's quads. Where the CPU has the dot product
// (Armv8.2 dotprod, FEAT_DotProd; HWCAP_ASIMDDP, checked when the table is filled), sdot adds each
// output's four products with the activation quad (sdot by element) into its int32 lane (int8
// products summed four at a time into int32: exact, -128 included); without it, vmull_s8 widens
// the products to int16 (|w x| <= 128 * 128, exact) and vpadalq_s16 adds pairs of them into int32
// lanes, one pair sum of an output per lane, whose neighbours vpaddq_s32 adds at the block's end.
// Both give every isum exactly; the f32 chain is the reference's, with vfmaq_f32 (fused).

// Quad-interleaved vector v of block (g, b) as signed int8, in halves: stored, or the nibbles of
// chunk v / 2 (low for even v, high for odd), less 8 for Q4_0 (Q4_K's as they are).
HWY_INLINE void LoadQuadsNeon(const BlockMatrix& w, const uint8_t* block, int v, int8x16_t* half) {
  for (int h = 0; h < 2; ++h) {
    if (!w.nibbles) {
      half[h] = vreinterpretq_s8_u8(vld1q_u8(block + v * 32 + h * 16));
      continue;
    }
    const uint8x16_t chunk = vld1q_u8(block + (v / 2) * 32 + h * 16);
    const uint8x16_t nibbles = v % 2 == 0 ? vandq_u8(chunk, vdupq_n_u8(15)) : vshrq_n_u8(chunk, 4);
    half[h] = vsubq_s8(vreinterpretq_s8_u8(nibbles), vdupq_n_s8(w.k_quants ? 0 : 8));
  }
}

// Activation quad v of block b of row m in every lane.
HWY_INLINE int8x16_t QuadNeon(const int8_t* qx, int64_t K, int64_t m, int64_t b, int v) {
  int32_t quad;
  std::memcpy(&quad, qx + m * K + b * kBlockValues + v * 4, 4);
  return vreinterpretq_s8_s32(vdupq_n_s32(quad));
}

// The step of block b for rows [m0, m0 + R): s = dw * dx (one rounding), acc = fma(float(isum), s,
// acc) (the f16 widening and the conversion exact, |isum| < 2^24).
template <int R>
HWY_INLINE void ChainStepNeon(const int32x4_t (*isum)[2], const BlockMatrix& w, int64_t g, int64_t b,
                              const float* dx, int64_t m0, float32x4_t (*acc)[2]) {
  const uint16x8_t bits = vreinterpretq_u16_u8(vld1q_u8(w.scales_at(g, b)));  // little-endian f16
  const float32x4_t dw[2] = {vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(bits))),
                             vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(bits)))};
  for (int r = 0; r < R; ++r) {
    const float32x4_t x_scale = vdupq_n_f32(dx[(m0 + r) * w.blocks + b]);
    for (int h = 0; h < 2; ++h)
      acc[r][h] = vfmaq_f32(acc[r][h], vcvtq_f32_s32(isum[r][h]), vmulq_f32(dw[h], x_scale));
  }
}

template <int R>
HWY_INLINE void StoreRowsNeon(const float32x4_t (*acc)[2], const BlockMatrix& w, int64_t g, int64_t m0, float* y,
                              int64_t ldy) {
  const int64_t col0 = g * kBlockGroup, cols = std::min<int64_t>(kBlockGroup, w.N - col0);
  for (int r = 0; r < R; ++r) {
    float* out = y + (m0 + r) * ldy + col0;
    if (cols == kBlockGroup) {
      vst1q_f32(out, acc[r][0]);
      vst1q_f32(out + 4, acc[r][1]);
      continue;
    }
    float lanes[kBlockGroup];
    vst1q_f32(lanes, acc[r][0]);
    vst1q_f32(lanes + 4, acc[r][1]);
    std::memcpy(out, lanes, static_cast<size_t>(cols) * sizeof(float));
  }
}

// A K-quant super-block's header for a group's 8 outputs in two halves (outputs 0-3, 4-7): the
// f16 super-scales widened exactly, and the forms as lane masks (all ones: minus_min).
struct KHeaderNeon {
  float32x4_t d1[2], d2[2];
  uint32x4_t mask[2];
};
HWY_INLINE void WidenF16Neon(const uint8_t* p, float32x4_t* out) {  // 8 little-endian f16, exact
  const uint16x8_t bits = vreinterpretq_u16_u8(vld1q_u8(p));
  out[0] = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(bits)));
  out[1] = vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(bits)));
}
HWY_INLINE void WidenS8Neon(const uint8_t* p, int32x4_t* out) {  // 8 int8, exact
  const int16x8_t v = vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(p)));
  out[0] = vmovl_s16(vget_low_s16(v));
  out[1] = vmovl_s16(vget_high_s16(v));
}
HWY_INLINE KHeaderNeon LoadKHeaderNeon(const BlockMatrix& w, int64_t g, int64_t b) {
  KHeaderNeon h;
  const uint8_t* p = w.k_header(g, b);
  WidenF16Neon(p, h.d1);
  WidenF16Neon(p + 2 * kBlockGroup, h.d2);
  int32x4_t m[2];
  WidenS8Neon(p + 4 * kBlockGroup, m);
  h.mask[0] = vreinterpretq_u32_s32(m[0]);
  h.mask[1] = vreinterpretq_u32_s32(m[1]);
  return h;
}

// Block b's two steps for rows [m0, m0 + R) of a group of K-quants, from the exact half sums
// half[r][0] (inputs 0-15) and half[r][1] (16-31), each in two halves of outputs: per lane
// i1 = low + (high & mask), i2 = mask ? xsum : high, c1 = f32(d1) * s1, c2 = f32(d2) * s2 (exact),
// acc = fma(float(i1), c1 * dx, acc), acc = fma(float(i2), c2 * dx, acc) (vfmaq_f32: fused), as
// MatmulBlocksScalar.
template <int R>
HWY_INLINE void KStepsNeon(const int32x4_t (*half)[2][2], const KHeaderNeon& header, const BlockMatrix& w,
                           const uint8_t* block, const float* dx, const int32_t* xsum, int64_t m0, int64_t b,
                           float32x4_t (*acc)[2]) {
  int32x4_t s1[2], s2[2];
  WidenS8Neon(block + w.int_bytes(), s1);
  WidenS8Neon(block + w.int_bytes() + kBlockGroup, s2);
  for (int h = 0; h < 2; ++h) {
    const float32x4_t c1 = vmulq_f32(header.d1[h], vcvtq_f32_s32(s1[h]));
    const float32x4_t c2 = vmulq_f32(header.d2[h], vcvtq_f32_s32(s2[h]));
    for (int r = 0; r < R; ++r) {
      const int64_t i = (m0 + r) * w.blocks + b;
      const float32x4_t x_scale = vdupq_n_f32(dx[i]);
      const int32x4_t lo = half[r][0][h], hi = half[r][1][h];
      const int32x4_t i1 = vaddq_s32(lo, vandq_s32(hi, vreinterpretq_s32_u32(header.mask[h])));
      const int32x4_t i2 = vbslq_s32(header.mask[h], vdupq_n_s32(xsum[i]), hi);
      acc[r][h] = vfmaq_f32(acc[r][h], vcvtq_f32_s32(i1), vmulq_f32(c1, x_scale));
      acc[r][h] = vfmaq_f32(acc[r][h], vcvtq_f32_s32(i2), vmulq_f32(c2, x_scale));
    }
  }
}

// Functions that use the dot product: Armv8.2 with dotprod (vdotq_s32's own target in
// arm_neon.h), and the crypto extension Highway's NEON code is compiled with, so that its inline
// functions may be inlined here.
#define LOCKSTEP_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod+crypto")))

// isum + each lane's four products of its weight quads w with quad `lane` of x (sdot by element:
// the activations' quad taken from a register, no broadcast of its own).
LOCKSTEP_DOTPROD inline int32x4_t DotLane(int32x4_t isum, int8x16_t w, int8x16_t x, int lane) {
  switch (lane) {
    case 0: return vdotq_laneq_s32(isum, w, x, 0);
    case 1: return vdotq_laneq_s32(isum, w, x, 1);
    case 2: return vdotq_laneq_s32(isum, w, x, 2);
    default: return vdotq_laneq_s32(isum, w, x, 3);
  }
}

// Rows [m0, m0 + R) of group g with sdot: each row's block of activations in two registers,
// quad v in lane v % 4 of the (v / 4)th.
template <int R>
LOCKSTEP_DOTPROD inline void GroupRowsSdot(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w,
                                           int64_t g, float* y, int64_t ldy) {
  float32x4_t acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < w.blocks; ++b) {
    const uint8_t* block = w.block(g, b);
    int32x4_t isum[R][2];
    int8x16_t x[R][2];
    for (int r = 0; r < R; ++r) {
      isum[r][0] = isum[r][1] = vdupq_n_s32(0);
      for (int h = 0; h < 2; ++h) x[r][h] = vld1q_s8(qx + (m0 + r) * w.K + b * kBlockValues + h * 16);
    }
    for (int v = 0; v < 8; ++v) {
      int8x16_t wv[2];
      LoadQuadsNeon(w, block, v, wv);
      for (int r = 0; r < R; ++r) {
        isum[r][0] = DotLane(isum[r][0], wv[0], x[r][v / 4], v % 4);
        isum[r][1] = DotLane(isum[r][1], wv[1], x[r][v / 4], v % 4);
      }
    }
    ChainStepNeon<R>(isum, w, g, b, dx, m0, acc);
  }
  StoreRowsNeon<R>(acc, w, g, m0, y, ldy);
}
// K-quants (BlockMatrix::k_quants) with sdot: each output's sums of inputs 0-15 and 16-31 apart
// (int32, exact), then KStepsNeon.
template <int R>
LOCKSTEP_DOTPROD inline void GroupRowsKSdot(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w,
                                            int64_t g, float* y, int64_t ldy, const int32_t* xsum) {
  float32x4_t acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
  KHeaderNeon header{};  // set at b = 0
  for (int64_t b = 0; b < w.blocks; ++b) {
    if (b % 8 == 0) header = LoadKHeaderNeon(w, g, b);
    const uint8_t* block = w.block(g, b);
    int32x4_t half[R][2][2];  // [row][inputs 0-15, 16-31][outputs 0-3, 4-7]
    int8x16_t x[R][2];
    for (int r = 0; r < R; ++r) {
      half[r][0][0] = half[r][0][1] = half[r][1][0] = half[r][1][1] = vdupq_n_s32(0);
      for (int h = 0; h < 2; ++h) x[r][h] = vld1q_s8(qx + (m0 + r) * w.K + b * kBlockValues + h * 16);
    }
    for (int v = 0; v < 8; ++v) {
      int8x16_t wv[2];
      LoadQuadsNeon(w, block, v, wv);
      for (int r = 0; r < R; ++r) {
        half[r][v / 4][0] = DotLane(half[r][v / 4][0], wv[0], x[r][v / 4], v % 4);
        half[r][v / 4][1] = DotLane(half[r][v / 4][1], wv[1], x[r][v / 4], v % 4);
      }
    }
    KStepsNeon<R>(half, header, w, block, dx, xsum, m0, b, acc);
  }
  StoreRowsNeon<R>(acc, w, g, m0, y, ldy);
}
#undef LOCKSTEP_DOTPROD

// The integer sums of block b's quads [v_begin, v_end) with widening multiplies (Armv8.0, no
// dot product): isum[r][h] lane i = output 4h + i's sum for row m0 + r.
template <int R>
HWY_INLINE void WideningSums(const int8_t* qx, int64_t m0, const BlockMatrix& w, const uint8_t* block, int64_t b,
                             int v_begin, int v_end, int32x4_t (&isum)[R][2]) {
  int32x4_t pairs[R][4];  // outputs (0, 1), (2, 3), (4, 5), (6, 7): lanes of pair sums
  for (int r = 0; r < R; ++r)
    for (int q = 0; q < 4; ++q) pairs[r][q] = vdupq_n_s32(0);
  for (int v = v_begin; v < v_end; ++v) {
    int8x16_t wv[2];
    LoadQuadsNeon(w, block, v, wv);
    for (int r = 0; r < R; ++r) {
      const int8x16_t x = QuadNeon(qx, w.K, m0 + r, b, v);
      for (int h = 0; h < 2; ++h) {
        pairs[r][2 * h] = vpadalq_s16(pairs[r][2 * h], vmull_s8(vget_low_s8(wv[h]), vget_low_s8(x)));
        pairs[r][2 * h + 1] = vpadalq_s16(pairs[r][2 * h + 1], vmull_high_s8(wv[h], x));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int h = 0; h < 2; ++h) isum[r][h] = vpaddq_s32(pairs[r][2 * h], pairs[r][2 * h + 1]);
}

// Rows [m0, m0 + R) of group g with widening multiplies (Armv8.0).
template <int R>
HWY_INLINE void GroupRowsWidening(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w, int64_t g,
                                  float* y, int64_t ldy) {
  float32x4_t acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < w.blocks; ++b) {
    int32x4_t isum[R][2];
    WideningSums<R>(qx, m0, w, w.block(g, b), b, 0, 8, isum);
    ChainStepNeon<R>(isum, w, g, b, dx, m0, acc);
  }
  StoreRowsNeon<R>(acc, w, g, m0, y, ldy);
}

// K-quants with widening multiplies (Armv8.0): WideningSums of inputs 0-15 and of 16-31
// apart, each output's two half sums, then KStepsNeon.
template <int R>
HWY_INLINE void GroupRowsKWidening(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w, int64_t g,
                                   float* y, int64_t ldy, const int32_t* xsum) {
  float32x4_t acc[R][2];
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
  KHeaderNeon header{};  // set at b = 0
  for (int64_t b = 0; b < w.blocks; ++b) {
    if (b % 8 == 0) header = LoadKHeaderNeon(w, g, b);
    const uint8_t* block = w.block(g, b);
    int32x4_t half[R][2][2];
    for (int part = 0; part < 2; ++part) {  // inputs 0-15 (quads 0-3), then 16-31
      int32x4_t isum[R][2];
      WideningSums<R>(qx, m0, w, block, b, 4 * part, 4 * part + 4, isum);
      for (int r = 0; r < R; ++r)
        for (int h = 0; h < 2; ++h) half[r][part][h] = isum[r][h];
    }
    KStepsNeon<R>(half, header, w, block, dx, xsum, m0, b, acc);
  }
  StoreRowsNeon<R>(acc, w, g, m0, y, ldy);
}

void MatmulBlocksSdot(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin,
                      int64_t g_end, float* y, int64_t ldy) {
  if (w.k_quants) {
    const int32_t* xsum = RowBlockSums(qx, M, w.blocks);
    for (int64_t g = g_begin; g < g_end; ++g)
      RowTiles(M, [&]<int R>(int64_t m0) { GroupRowsKSdot<R>(qx, dx, m0, w, g, y, ldy, xsum); });
    return;
  }
  for (int64_t g = g_begin; g < g_end; ++g)
    RowTiles(M, [&]<int R>(int64_t m0) { GroupRowsSdot<R>(qx, dx, m0, w, g, y, ldy); });
}

void MatmulBlocks(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                  float* y, int64_t ldy) {
  if (w.k_quants) {
    const int32_t* xsum = RowBlockSums(qx, M, w.blocks);
    for (int64_t g = g_begin; g < g_end; ++g)
      RowTiles(M, [&]<int R>(int64_t m0) { GroupRowsKWidening<R>(qx, dx, m0, w, g, y, ldy, xsum); });
    return;
  }
  for (int64_t g = g_begin; g < g_end; ++g)
    RowTiles(M, [&]<int R>(int64_t m0) { GroupRowsWidening<R>(qx, dx, m0, w, g, y, ldy); });
}

#else  // SVE, SVE2, SVE_256, SVE2_128
// SVE at any vector length (128 to 2048 bits, as the process runs): a tile is svcntw() consecutive
// columns, lane i column c0 + i, that is output (c0 + i) % 8 of group (c0 + i) / 8. Where a tile is
// at most one group (128 and 256 bits) its lanes' weight quads and scales are consecutive in the
// record and load as they are; wider tiles span groups and gather each lane's 4-byte quad word and
// f16 scale from its group's record (offsets fixed per tile). sdot (base SVE) adds each output's
// four products with the broadcast activation quad into its lane: isum exactly, at any length.
// The f32 chain is the reference's: svmul (one rounding), the exact conversions, svmla (fused).

// Quad-interleaved vector v of the tile's block b as signed int8 in each lane's four bytes:
// stored, or the nibbles of chunk v / 2 (low for even v, high for odd) less 8. `at` is the first
// group's record; lanes outside `live` are not loaded.
HWY_INLINE svint8_t LoadQuadsSve(const BlockMatrix& w, const uint8_t* at, int v, svbool_t live, bool contiguous,
                                 int64_t j0, svuint32_t word_at) {
  const uint8_t* vector = at + (w.nibbles ? (v / 2) * 32 : v * 32);
  const svuint32_t words =
      contiguous ? svld1_u32(live, reinterpret_cast<const uint32_t*>(vector + j0 * 4))
                 : svld1_gather_u32offset_u32(live, reinterpret_cast<const uint32_t*>(vector), word_at);
  svuint8_t bytes = svreinterpret_u8_u32(words);
  if (!w.nibbles) return svreinterpret_s8_u8(bytes);
  const svbool_t all = svptrue_b8();
  bytes = v % 2 == 0 ? svand_n_u8_x(all, bytes, 15) : svlsr_n_u8_x(all, bytes, 4);
  return svsub_n_s8_x(all, svreinterpret_s8_u8(bytes), w.k_quants ? 0 : 8);  // Q4_K's nibbles as they are
}

// isum + each lane's four products of its weight quad with activation quad v of block b of row m:
// sdot by element, whose index picks a quad in each 128-bit segment, from the block's half that
// holds quad v replicated to every segment (ld1rq).
HWY_INLINE svint32_t DotQuad(svint32_t isum, svint8_t wv, const int8_t* qx, int64_t K, int64_t m, int64_t b, int v) {
  const svint8_t x = svld1rq_s8(svptrue_b8(), qx + m * K + b * kBlockValues + (v / 4) * 16);
  switch (v % 4) {
    case 0: return svdot_lane_s32(isum, wv, x, 0);
    case 1: return svdot_lane_s32(isum, wv, x, 1);
    case 2: return svdot_lane_s32(isum, wv, x, 2);
    default: return svdot_lane_s32(isum, wv, x, 3);
  }
}

// One row's step of a block: s = dw * dx (one rounding), acc = fma(float(isum), s, acc) (the
// conversion exact, |isum| < 2^24; svmla fused).
HWY_INLINE svfloat32_t ChainStepSve(svbool_t live, svfloat32_t acc, svint32_t isum, svfloat32_t dw, float x_scale) {
  return svmla_f32_x(live, acc, svcvt_f32_s32_x(live, isum), svmul_n_f32_x(live, dw, x_scale));
}

// Rows [m0, m0 + R) of the tile of columns starting at c0 (c0 < c_end, the end of the groups
// asked for).
template <int R>
HWY_INLINE void TileRowsSve(const int8_t* qx, const float* dx, int64_t m0, const BlockMatrix& w, int64_t c0,
                            int64_t c_end, float* y, int64_t ldy) {
  const int64_t g0 = c0 / kBlockGroup, j0 = c0 % kBlockGroup;
  const int64_t lanes = static_cast<int64_t>(svcntw());
  const bool contiguous = lanes <= kBlockGroup && kBlockGroup % lanes == 0;
  const svbool_t all = svptrue_b32();
  const svbool_t live = svwhilelt_b32_s64(c0, c_end);                      // columns of the groups asked for
  const svbool_t stored = svwhilelt_b32_s64(c0, std::min<int64_t>(c_end, w.N));  // and before N
  // Byte offsets from the first group's record to lane i's quad word and scale: the group
  // (j0 + i) / 8 records of `blocks` later, output (j0 + i) % 8 within it.
  const svuint32_t lane = svindex_u32(static_cast<uint32_t>(j0), 1);
  const svuint32_t group_offset =
      svmul_n_u32_x(all, svlsr_n_u32_x(all, lane, 3), static_cast<uint32_t>(w.blocks * w.record_bytes()));
  const svuint32_t output = svand_n_u32_x(all, lane, 7);
  const svuint32_t word_at = svadd_u32_x(all, group_offset, svlsl_n_u32_x(all, output, 2));
  const svuint32_t scale_at =
      svadd_u32_x(all, svadd_n_u32_x(all, group_offset, static_cast<uint32_t>(w.int_bytes())),
                  svlsl_n_u32_x(all, output, 1));
  // Rows in named registers (SVE types make no arrays): row r's only where R > r.
  const svfloat32_t zero = svdup_n_f32(0.0f);
  svfloat32_t acc0 = zero, acc1 = zero, acc2 = zero, acc3 = zero;
  for (int64_t b = 0; b < w.blocks; ++b) {
    const uint8_t* at = w.block(g0, b);
    svint32_t isum0 = svdup_n_s32(0), isum1 = isum0, isum2 = isum0, isum3 = isum0;
    for (int v = 0; v < 8; ++v) {
      const svint8_t wv = LoadQuadsSve(w, at, v, live, contiguous, j0, word_at);
      isum0 = DotQuad(isum0, wv, qx, w.K, m0, b, v);
      if constexpr (R > 1) isum1 = DotQuad(isum1, wv, qx, w.K, m0 + 1, b, v);
      if constexpr (R > 2) isum2 = DotQuad(isum2, wv, qx, w.K, m0 + 2, b, v);
      if constexpr (R > 3) isum3 = DotQuad(isum3, wv, qx, w.K, m0 + 3, b, v);
    }
    const svuint32_t bits =
        contiguous ? svld1uh_u32(live, reinterpret_cast<const uint16_t*>(at + w.int_bytes() + j0 * 2))
                   : svld1uh_gather_u32offset_u32(live, reinterpret_cast<const uint16_t*>(at), scale_at);
    const svfloat32_t dw = svcvt_f32_f16_x(live, svreinterpret_f16_u32(bits));  // exact; f16 in each lane's low half
    const float* dxb = dx + m0 * w.blocks + b;  // row m0 + r's scale at dxb[r * blocks]
    acc0 = ChainStepSve(live, acc0, isum0, dw, dxb[0]);
    if constexpr (R > 1) acc1 = ChainStepSve(live, acc1, isum1, dw, dxb[w.blocks]);
    if constexpr (R > 2) acc2 = ChainStepSve(live, acc2, isum2, dw, dxb[2 * w.blocks]);
    if constexpr (R > 3) acc3 = ChainStepSve(live, acc3, isum3, dw, dxb[3 * w.blocks]);
  }
  float* out = y + m0 * ldy + c0;
  svst1_f32(stored, out, acc0);
  if constexpr (R > 1) svst1_f32(stored, out + ldy, acc1);
  if constexpr (R > 2) svst1_f32(stored, out + 2 * ldy, acc2);
  if constexpr (R > 3) svst1_f32(stored, out + 3 * ldy, acc3);
}

// K-quants (BlockMatrix::k_quants): rows [m0, m0 + R) of the tile of columns starting at c0, as
// TileRowsSve with each output's sums of inputs 0-15 (`lo`) and 16-31 (`hi`) apart, then per lane
// i1 = lo + (hi & mask), i2 = mask ? xsum : hi, and the two fused steps with c1 = f32(d1) * s1 and
// c2 = f32(d2) * s2 (exact): MatmulBlocksScalar's integers and steps. A lane's header entries (d1,
// d2 f16, mask int8) and scales (s1, s2 int8) are its group's, loaded or gathered as its quads.
template <int R>
HWY_INLINE void TileRowsKSve(const int8_t* qx, const float* dx, const int32_t* xsum, int64_t m0, const BlockMatrix& w,
                             int64_t c0, int64_t c_end, float* y, int64_t ldy) {
  const int64_t g0 = c0 / kBlockGroup, j0 = c0 % kBlockGroup;
  const int64_t lanes = static_cast<int64_t>(svcntw());
  const bool contiguous = lanes <= kBlockGroup && kBlockGroup % lanes == 0;
  const svbool_t all = svptrue_b32();
  const svbool_t live = svwhilelt_b32_s64(c0, c_end);
  const svbool_t stored = svwhilelt_b32_s64(c0, std::min<int64_t>(c_end, w.N));
  const svuint32_t lane = svindex_u32(static_cast<uint32_t>(j0), 1);
  const svuint32_t group_offset =  // a block's record in group g0 + i to the same block's in g0
      svmul_n_u32_x(all, svlsr_n_u32_x(all, lane, 3), static_cast<uint32_t>(w.blocks / 8 * w.super_record_bytes()));
  const svuint32_t output = svand_n_u32_x(all, lane, 7);
  const svuint32_t word_at = svadd_u32_x(all, group_offset, svlsl_n_u32_x(all, output, 2));
  const svuint32_t byte_at = svadd_u32_x(all, group_offset, output);
  const svuint32_t half_at = svadd_u32_x(all, group_offset, svlsl_n_u32_x(all, output, 1));
  auto f16s = [&](const uint8_t* p) {  // 8 f16 of each lane's group, widened exactly
    const svuint32_t bits = contiguous ? svld1uh_u32(live, reinterpret_cast<const uint16_t*>(p) + j0)
                                       : svld1uh_gather_u32offset_u32(live, reinterpret_cast<const uint16_t*>(p), half_at);
    return svcvt_f32_f16_x(live, svreinterpret_f16_u32(bits));
  };
  auto int8s = [&](const uint8_t* p) {  // 8 int8 of each lane's group, widened exactly
    return contiguous ? svld1sb_s32(live, reinterpret_cast<const int8_t*>(p) + j0)
                      : svld1sb_gather_u32offset_s32(live, reinterpret_cast<const int8_t*>(p), byte_at);
  };
  const svfloat32_t zero = svdup_n_f32(0.0f);
  svfloat32_t acc0 = zero, acc1 = zero, acc2 = zero, acc3 = zero, d1 = zero, d2 = zero;
  svbool_t minus_min = svpfalse_b();
  for (int64_t b = 0; b < w.blocks; ++b) {
    if (b % 8 == 0) {
      const uint8_t* h = w.k_header(g0, b);
      d1 = f16s(h);
      d2 = f16s(h + 2 * kBlockGroup);
      minus_min = svcmpne_n_s32(live, int8s(h + 4 * kBlockGroup), 0);
    }
    const uint8_t* at = w.block(g0, b);
    const svint32_t none = svdup_n_s32(0);
    svint32_t lo0 = none, lo1 = none, lo2 = none, lo3 = none, hi0 = none, hi1 = none, hi2 = none, hi3 = none;
    for (int v = 0; v < 4; ++v) {
      const svint8_t wv = LoadQuadsSve(w, at, v, live, contiguous, j0, word_at);
      lo0 = DotQuad(lo0, wv, qx, w.K, m0, b, v);
      if constexpr (R > 1) lo1 = DotQuad(lo1, wv, qx, w.K, m0 + 1, b, v);
      if constexpr (R > 2) lo2 = DotQuad(lo2, wv, qx, w.K, m0 + 2, b, v);
      if constexpr (R > 3) lo3 = DotQuad(lo3, wv, qx, w.K, m0 + 3, b, v);
    }
    for (int v = 4; v < 8; ++v) {
      const svint8_t wv = LoadQuadsSve(w, at, v, live, contiguous, j0, word_at);
      hi0 = DotQuad(hi0, wv, qx, w.K, m0, b, v);
      if constexpr (R > 1) hi1 = DotQuad(hi1, wv, qx, w.K, m0 + 1, b, v);
      if constexpr (R > 2) hi2 = DotQuad(hi2, wv, qx, w.K, m0 + 2, b, v);
      if constexpr (R > 3) hi3 = DotQuad(hi3, wv, qx, w.K, m0 + 3, b, v);
    }
    const svfloat32_t c1 = svmul_f32_x(live, d1, svcvt_f32_s32_x(live, int8s(at + w.int_bytes())));
    const svfloat32_t c2 = svmul_f32_x(live, d2, svcvt_f32_s32_x(live, int8s(at + w.int_bytes() + kBlockGroup)));
    auto steps = [&](svfloat32_t acc, svint32_t lo, svint32_t hi, int r) {
      const int64_t i = (m0 + r) * w.blocks + b;
      const svint32_t i1 = svadd_s32_x(live, lo, svsel_s32(minus_min, hi, none));
      const svint32_t i2 = svsel_s32(minus_min, svdup_n_s32(xsum[i]), hi);
      acc = svmla_f32_x(live, acc, svcvt_f32_s32_x(live, i1), svmul_n_f32_x(live, c1, dx[i]));
      return svmla_f32_x(live, acc, svcvt_f32_s32_x(live, i2), svmul_n_f32_x(live, c2, dx[i]));
    };
    acc0 = steps(acc0, lo0, hi0, 0);
    if constexpr (R > 1) acc1 = steps(acc1, lo1, hi1, 1);
    if constexpr (R > 2) acc2 = steps(acc2, lo2, hi2, 2);
    if constexpr (R > 3) acc3 = steps(acc3, lo3, hi3, 3);
  }
  float* out = y + m0 * ldy + c0;
  svst1_f32(stored, out, acc0);
  if constexpr (R > 1) svst1_f32(stored, out + ldy, acc1);
  if constexpr (R > 2) svst1_f32(stored, out + 2 * ldy, acc2);
  if constexpr (R > 3) svst1_f32(stored, out + 3 * ldy, acc3);
}

void MatmulBlocks(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                  float* y, int64_t ldy) {
  const int64_t c_end = g_end * kBlockGroup, lanes = static_cast<int64_t>(svcntw());
  if (w.k_quants) {
    const int32_t* xsum = RowBlockSums(qx, M, w.blocks);
    for (int64_t c0 = g_begin * kBlockGroup; c0 < c_end; c0 += lanes)
      RowTiles(M, [&]<int R>(int64_t m0) { TileRowsKSve<R>(qx, dx, xsum, m0, w, c0, c_end, y, ldy); });
    return;
  }
  for (int64_t c0 = g_begin * kBlockGroup; c0 < c_end; c0 += lanes)
    RowTiles(M, [&]<int R>(int64_t m0) { TileRowsSve<R>(qx, dx, m0, w, c0, c_end, y, ldy); });
}
#endif

#else  // no integer dot product written for this target yet: the scalar loops

void MatmulBlocks(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                  float* y, int64_t ldy) {
  MatmulBlocksScalar(qx, dx, M, w, g_begin, g_end, y, ldy);
}

#endif

void FillMatmulBlocks(Kernels& k) {
  k.matmul_blocks = &MatmulBlocks;
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (__builtin_cpu_supports("avx512vnni")) k.matmul_blocks = &MatmulBlocksVnni;
#endif
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  k.matmul_blocks_kernel = k.matmul_blocks == &MatmulBlocks ? "avx2 maddubs" : "avx512 vnni";
#elif HWY_ARCH_ARM_A64 && HWY_TARGET == HWY_NEON
  k.matmul_blocks_kernel = "neon widening";
  if (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) {
    k.matmul_blocks = &MatmulBlocksSdot;
    k.matmul_blocks_kernel = "neon sdot";
  }
#elif HWY_ARCH_ARM_A64 && (HWY_TARGET == HWY_SVE || HWY_TARGET == HWY_SVE2 || HWY_TARGET == HWY_SVE_256 || \
                           HWY_TARGET == HWY_SVE2_128)
  k.matmul_blocks_kernel = "sve sdot";
#endif
  k.matmul_blocks_scalar = &MatmulBlocksScalar;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
