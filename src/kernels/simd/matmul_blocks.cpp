// The integer matmul of the profile lockstep-int8dot-1 (ref::matmul_blocks_quantized's twin):
// y [M, N] from activations quantized per block of 32 (qx, dx: ref::quantize_activations) and a
// BlockMatrix. A group's kBlockGroup outputs sit in the lanes of one f32 accumulator vector; for
// each block b in increasing order the kernel forms every output's integer block sum in its lane
// (exact: any lane split and any order of integer adds give the same int32), converts it (exact),
// and runs acc = fma(float(isum), dw * dx, acc): one chain per output in block order, as the
// reference. Rows go in tiles of up to kBlockRows sharing each group's weight loads (prefill);
// one row (decoding) is a tile of one. Threads split the groups.
//
// Highway 1.0.3 has no int8 dot product, so x86 uses AVX2 intrinsics inside Highway's per-target
// code (AVX2 and AVX-512 targets), and on the AVX-512 targets AVX-512 VNNI's vpdpbusd where the
// CPU has it; every other target (NEON, SVE, the portable baseline) runs the scalar loops, which
// compute the same integers (Arm's sdot is not used yet).
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
          int32_t isum = 0;
          for (int k = 0; k < kBlockValues; ++k) isum += w.value(g, b, j, k) * x[k];
          const float s = w.scale(g, b, j) * dx[m * B + b];
          acc = ref::fma_f32(static_cast<float>(isum), s, acc);
        }
        y[m * ldy + g * kBlockGroup + j] = acc;
      }
    }
  }
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
      const __m256i low = _mm256_set1_epi8(15);
      for (int c = 0; c < 4; ++c) {  // int16 pair sums in isum, widened after the block
        __m256i even_x[R], odd_x[R];
        for (int r = 0; r < R; ++r) {
          even_x[r] = Quad(qb + r * K, 2 * c);
          odd_x[r] = Quad(qb + r * K, 2 * c + 1);
        }
        for (int gi = 0; gi < G; ++gi) {
          const __m256i chunk = LoadQuads(at.ints(gi, b), c);
          const __m256i even = _mm256_and_si256(chunk, low), odd = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), low);
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
        for (int r = 0; r < R; ++r) xq[r] = Quad(qb + r * K, v);
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
      const __m256i low = _mm256_set1_epi8(15);
      for (int c = 0; c < 4; ++c) {
        __m256i even_x[R], odd_x[R];
        for (int r = 0; r < R; ++r) {
          even_x[r] = Quad(qb + r * K, 2 * c);
          odd_x[r] = Quad(qb + r * K, 2 * c + 1);
        }
        for (int gi = 0; gi < G; ++gi) {
          const __m256i chunk = LoadQuads(at.ints(gi, b), c);
          const __m256i even = _mm256_and_si256(chunk, low), odd = _mm256_and_si256(_mm256_srli_epi16(chunk, 4), low);
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
        for (int r = 0; r < R; ++r) xq[r] = Quad(ub + r * K, v);
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
#else
constexpr bool kHasVnni = false;
template <int R, int G, bool kNibbles>
void GroupRowsVnni(const int8_t*, const float*, int64_t, const BlockMatrix&, int64_t, float*, int64_t, const int32_t*,
                   const int8_t*) {}
#endif

// Groups [g_begin, g_end), rows in tiles of kBlockRows and a last smaller one.
template <bool kVnni>
void MatmulBlocksOf(const int8_t* qx, const float* dx, int64_t M, const BlockMatrix& w, int64_t g_begin, int64_t g_end,
                    float* y, int64_t ldy) {
  // Over nibbles: each row's block sums of x (integers), once per call.
  thread_local std::vector<int32_t> xsum;
  if (w.nibbles) {
    xsum.resize(static_cast<size_t>(M * w.blocks));
    for (int64_t i = 0; i < M * w.blocks; ++i) {
      int32_t sum = 0;
      for (int j = 0; j < kBlockValues; ++j) sum += qx[i * kBlockValues + j];
      xsum[static_cast<size_t>(i)] = sum;
    }
  }
  // VNNI over int8 weights: the activations as x + 128 (flipping the sign bit), once per call.
  thread_local std::vector<int8_t> xu;
  if (kVnni && !w.nibbles) {
    xu.resize(static_cast<size_t>(M * w.K));
    for (int64_t i = 0; i < M * w.K; ++i) xu[static_cast<size_t>(i)] = static_cast<int8_t>(qx[i] ^ -128);
  }
  auto tile = [&]<int R, int G>(int64_t m, int64_t g) {
    if constexpr (kVnni) {
      if (w.nibbles) {
        GroupRowsVnni<R, G, true>(qx, dx, m, w, g, y, ldy, xsum.data(), xu.data());
      } else {
        GroupRowsVnni<R, G, false>(qx, dx, m, w, g, y, ldy, xsum.data(), xu.data());
      }
    } else if (w.nibbles) {
      GroupRows<R, G, true>(qx, dx, m, w, g, y, ldy, xsum.data());
    } else {
      GroupRows<R, G, false>(qx, dx, m, w, g, y, ldy, xsum.data());
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
  k.matmul_blocks_scalar = &MatmulBlocksScalar;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
