// The matmul kernel: c = a @ b with b packed in panels (kernels.hpp). A register tile of kRows
// rows x kVectors vectors of columns keeps one accumulator per output; the k loop runs in
// increasing k, one fma per step, exactly ref::matmul's chain. Splitting k into blocks of kDepth
// (so a panel's block stays in L1) stores the partial sums in c and reloads them: an exact round
// trip, so the chain is unchanged. Every loop order below (row blocks, panels, k blocks) keeps
// each output's chain in increasing k, so none of them changes a bit.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "kernels/ref/math.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/tile-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// B's weight (k, j) of panel p as f32: stored, a bf16 half widened exactly, or a q8 value times
// its column's scale (one rounded multiply: the expanded weight's bits).
inline float PackedWeight(const PackedMatrix& b, int64_t p, int64_t k, int64_t j) {
  if (b.q8 || b.q4) return b.weight(k, p * b.panel + j);
  if (!b.bf16) return b.panel_data(p)[k * b.panel + j];
  return std::bit_cast<float>(static_cast<uint32_t>(b.panel_data16(p)[k * b.panel + j]) << 16);
}

// One output at a time, a[m][k] at a[m * m_stride + k * k_stride]: the portable fallback of
// matmul (k_stride 1) and matmul_at (m_stride 1), and matmul_at over 16-bit B (which training, the
// user of matmul_at, never packs).
// With `accumulate`, each chain continues from the value already in c instead of +0.
void MatmulScalar(const float* a, int64_t m_stride, int64_t k_stride, int64_t M, const PackedMatrix& b,
                  int64_t p_begin, int64_t p_end, float* c, int64_t ldc, bool accumulate = false) {
  const int64_t K = b.K, NR = b.panel;
  for (int64_t p = p_begin; p < p_end; ++p) {
    const int64_t col0 = p * NR, cols = std::min<int64_t>(NR, b.N - col0);
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t j = 0; j < cols; ++j) {
        float acc = accumulate ? c[m * ldc + col0 + j] : 0.0f;
        for (int64_t k = 0; k < K; ++k)
          acc = ref::fma_f32(a[m * m_stride + k * k_stride], PackedWeight(b, p, k, j), acc);
        c[m * ldc + col0 + j] = acc;
      }
    }
  }
}

#if HWY_NATIVE_FMA

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_ARCH_ARM
constexpr int kRows = 8;     // 32 vector registers: 16 accumulators
constexpr int kVectors = 2;
#else
// 16 vector registers: 12 accumulators, 4 b vectors, broadcasts as loads. Three rows of four
// vectors measured faster than four of three on AVX2 (fewer broadcasts per FMA): about 82% of
// the FMA peak against 75% (bench: BM_Matmul).
constexpr int kRows = 3;
constexpr int kVectors = 4;
#endif
// Panels of B a single row sweeps at once: one row times kRows panels keeps the tile's
// accumulator count, enough to cover the FMA latency when decoding.
constexpr int kWidePanels = kRows;
constexpr int64_t kDepth = 256;
// Rows of A per block when M is large (training's 2048-row batches): the block's
// [kRowBlock][kDepth] of A stays in L2 while every panel of B passes over it, instead of all of A
// streaming from L3 once per panel (measured at M=2046 K=768 N=256: 68% -> 86% of the FMA peak).
// Up to kWholeRows rows A's block fits in L2 as a whole, and blocking would only re-read B
// (M=256 K=768 N=2304: 76% -> 66%).
constexpr int64_t kRowBlock = 96;
constexpr int64_t kWholeRows = 512;
// matmul_at packs kAtDepth rows of A (k) at a time into row tiles, and each tile's chains go
// through c once per block. 256 on Zen 4, three alternating rounds against 128: BM_MatmulAt
// 1.04x (256/2048/768) and 1.03x (768/2048/256), training's step (BM_TrainStep/0/1) 1.01x, its
// AVX2 code 1.008x; 512 matched 256.
constexpr int64_t kAtDepth = 256;

using DF = hn::ScalableTag<float>;

// One vector of B: f32 as stored, bf16 halves widened exactly to the same f32 values, or int8
// values widened (exactly: |q| <= 127) and multiplied by their columns' scales, scale[at ...]
// (one rounded multiply per weight: float(q) * scale, the expanded weight). `scale` is only read
// for int8.
HWY_INLINE hn::Vec<DF> LoadB(DF d, const float* HWY_RESTRICT p, const float*, int64_t) { return hn::Load(d, p); }
HWY_INLINE hn::Vec<DF> LoadB(DF d, const uint16_t* HWY_RESTRICT p, const float*, int64_t) {
  const hn::Rebind<uint16_t, DF> d16;
  const hn::RebindToUnsigned<DF> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p))));
}
HWY_INLINE hn::Vec<DF> LoadB(DF d, const int8_t* HWY_RESTRICT p, const float* HWY_RESTRICT scale, int64_t at) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::Mul(hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, p))), hn::Load(d, scale + at));
}

// A tile's a[i][k]: row-major (a[i * lda + k]) or, kPacked, the tile's packed block
// (a[k * kRows + i]: matmul_at).
template <int MR, bool kPacked = false, typename TB>
HWY_INLINE void Tile(const float* HWY_RESTRICT a, int64_t lda, const TB* HWY_RESTRICT b,
                     int64_t kc, float* HWY_RESTRICT c, int64_t ldc, bool first, int64_t cols,
                     const float* scale = nullptr, const TB* ahead = nullptr) {
  // ahead (null: none): a block of B laid out as b, whose row k is prefetched beside row k's FMAs.
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t NR = kVectors * N;
  const bool full = cols == NR;
  HWY_ALIGN float edge[MR * kVectors * (HWY_MAX_BYTES / sizeof(float))];
  float* out = full ? c : edge;
  const int64_t ldo = full ? ldc : NR;
  if (!full && !first) {
    for (int i = 0; i < MR; ++i) std::memcpy(edge + i * NR, c + i * ldc, static_cast<size_t>(cols) * sizeof(float));
  }
  // Accumulator I: row I / kVectors, vector I % kVectors (tile-inl.hpp).
  WithTile<MR * kVectors>(
      [&](auto I) LOCKSTEP_LAMBDA_INLINE {
        constexpr size_t i = decltype(I)::value / kVectors, v = decltype(I)::value % kVectors;
        return first ? hn::Zero(d) : hn::LoadU(d, out + i * ldo + v * N);
      },
      [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
        for (int64_t k = 0; k < kc; ++k) {
          const TB* bk = b + k * NR;
          if (ahead) {
            for (int64_t l = 0; l < NR * static_cast<int64_t>(sizeof(TB)); l += 64)
              hwy::Prefetch(reinterpret_cast<const char*>(ahead + k * NR) + l);
          }
          // Each row's broadcast and each vector of B are loaded once (the repeats fold away).
          const auto fma = [&](hn::Vec<DF>& c_iv, size_t i, size_t v) LOCKSTEP_LAMBDA_INLINE {
            const auto ai = hn::Set(d, kPacked ? a[k * kRows + i] : a[i * lda + k]);
            const int64_t at = static_cast<int64_t>(v) * N;
            c_iv = hn::MulAdd(ai, LoadB(d, bk + at, scale, at), c_iv);
          };
          (fma(acc, I / kVectors, I % kVectors), ...);
        }
        (hn::StoreU(acc, d, out + (I / kVectors) * ldo + (I % kVectors) * N), ...);
      });
  if (!full) {
    for (int i = 0; i < MR; ++i) std::memcpy(c + i * ldc, edge + i * NR, static_cast<size_t>(cols) * sizeof(float));
  }
}

template <int MR, bool kPacked = false, typename TB>
HWY_INLINE void TileRemainder(int64_t rows, const float* a, int64_t lda, const TB* b, int64_t kc,
                              float* c, int64_t ldc, bool first, int64_t cols, const float* scale = nullptr) {
  if constexpr (MR > 0) {
    if (rows == MR) {
      Tile<MR, kPacked>(a, lda, b, kc, c, ldc, first, cols, scale);
    } else {
      TileRemainder<MR - 1, kPacked>(rows, a, lda, b, kc, c, ldc, first, cols, scale);
    }
  }
}

// Few rows (decoding): MR rows times P panels at once, so that enough independent chains cover
// the FMA latency and P streams of B are in flight. Panels are full (cols == NR).
template <int MR, int P, typename TB>
HWY_INLINE void WideTile(const float* HWY_RESTRICT a, int64_t lda, const TB* HWY_RESTRICT b, int64_t panel_stride,
                         int64_t kc, float* HWY_RESTRICT c, int64_t ldc, bool first, const float* scale) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t NR = kVectors * N;
  // Accumulator I: row I % MR, panel I / (MR kVectors), vector (I / MR) % kVectors.
  constexpr size_t kTile = MR * P * kVectors;
  const auto at = [&](size_t I) LOCKSTEP_LAMBDA_INLINE { return (I % MR) * ldc + (I / (MR * kVectors)) * NR + ((I / MR) % kVectors) * N; };
  WithTile<kTile>([&](auto I) LOCKSTEP_LAMBDA_INLINE { return first ? hn::Zero(d) : hn::LoadU(d, c + at(decltype(I)::value)); },
                  [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
                    for (int64_t k = 0; k < kc; ++k) {
                      const auto fma = [&](hn::Vec<DF>& c_iqv, size_t I_) LOCKSTEP_LAMBDA_INLINE {
                        const int64_t i = I_ % MR, q = I_ / (MR * kVectors), v = (I_ / MR) % kVectors;
                        const auto bv = LoadB(d, b + q * panel_stride + k * NR + v * N, scale, q * NR + v * N);
                        c_iqv = hn::MulAdd(hn::Set(d, a[i * lda + k]), bv, c_iqv);
                      };
                      (fma(acc, I), ...);
                    }
                    (hn::StoreU(acc, d, c + at(I)), ...);
                  });
}

// M rows over the full panels of [p, full_end) in groups of P, then of P / 2, ... down to single
// panels (a share of a decode's panels need not be a multiple of P; every wide tile keeps its
// chains whole). Returns the first panel not done. scale: the q8 scales of every panel
// (PackedMatrix::scales), null otherwise.
template <int MR, int P, typename TB>
HWY_INLINE int64_t WidePanels(const float* a, int64_t lda, const PackedMatrix& b, const TB* data, const float* scale,
                              int64_t p, int64_t full_end, float* c, int64_t ldc) {
  const int64_t K = b.K, NR = b.panel;
  for (; p + P <= full_end; p += P) {
    for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, K - k0);
      WideTile<MR, P>(a + k0, lda, data + p * K * NR + k0 * NR, K * NR, kc, c + p * NR, ldc, k0 == 0,
                      scale ? scale + p * NR : nullptr);
    }
  }
  if constexpr (P > 1) p = WidePanels<MR, P / 2>(a, lda, b, data, scale, p, full_end, c, ldc);
  return p;
}

// M rows over panels [p, p_end): the full ones in wide tiles, then a last partial panel.
template <int MR, int P, typename TB>
HWY_INLINE void FewRows(const float* a, int64_t lda, const PackedMatrix& b, const TB* data, const float* scale,
                        int64_t p, int64_t p_end, float* c, int64_t ldc) {
  const int64_t K = b.K, NR = b.panel;
  p = WidePanels<MR, P>(a, lda, b, data, scale, p, std::min(p_end, b.N / NR), c, ldc);
  for (; p < p_end; ++p) {
    const int64_t cols = std::min<int64_t>(NR, b.N - p * NR);
    for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, K - k0);
      Tile<MR>(a + k0, lda, data + p * K * NR + k0 * NR, kc, c + p * NR, ldc, k0 == 0, cols,
               scale ? scale + p * NR : nullptr);
    }
  }
}

template <typename TB>
void MatmulOf(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, const TB* data, int64_t p_begin,
              int64_t p_end, float* c, int64_t ldc) {
  const int64_t K = b.K, NR = b.panel;
  const float* const scale = b.q8 ? b.scales.get() : nullptr;
  if (K > 0 && M == 1) return FewRows<1, kWidePanels>(a, lda, b, data, scale, p_begin, p_end, c, ldc);
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(c + m * ldc + p_begin * NR, c + m * ldc + std::min(b.N, p_end * NR), 0.0f);
    return;
  }
  const int64_t row_block = M <= kWholeRows ? M : kRowBlock;
  for (int64_t m0 = 0; m0 < M; m0 += row_block) {
    const int64_t m_end = std::min(M, m0 + row_block);
    for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, K - k0);
      const bool first = k0 == 0;
      for (int64_t p = p_begin; p < p_end; ++p) {
        const TB* bp = data + p * K * NR + k0 * NR;
        const int64_t col0 = p * NR;
        const int64_t cols = std::min<int64_t>(NR, b.N - col0);
        const float* const ps = scale ? scale + col0 : nullptr;
        // The first row tile asks for the next panel's block (same k rows) as it goes, so that
        // it streams in while this block's other row tiles compute from L1: a decoding step's
        // 16 rows are two tiles, and the weights come from the last-level cache
        // (BM_GenerationEngine/32: 1.06, 1.12 and 1.06x, medians of 14, 10 and 10 alternating rounds).
        const TB* ahead = p + 1 < p_end ? bp + K * NR : nullptr;
        int64_t m = m0;
        for (; m + kRows <= m_end; m += kRows, ahead = nullptr)
          Tile<kRows>(a + m * lda + k0, lda, bp, kc, c + m * ldc + col0, ldc, first, cols, ps, ahead);
        if (m < m_end)
          TileRemainder<kRows - 1>(m_end - m, a + m * lda + k0, lda, bp, kc, c + m * ldc + col0, ldc, first, cols,
                                   ps);
      }
    }
  }
}

// c = a^T @ b with a [K, M] (row stride lda): weight gradients (x^T @ dy), without transposing x.
// Each kAtDepth block of a's rows is packed into row tiles [tile][k][kRows] (columns past M
// zero), which the tiles read as broadcasts in order; the block then meets every panel of B.
// With `accumulate` (matmul_at_continue), every chain starts from c's value instead of +0.
void MatmulAtChains(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin, int64_t p_end,
                    float* c, int64_t ldc, float* scratch, bool accumulate) {
  const int64_t K = b.K, NR = b.panel;
  if (b.bf16 || b.q8 || b.q4) return MatmulScalar(a, 1, lda, M, b, p_begin, p_end, c, ldc, accumulate);
  if (K == 0 || M == 0) {
    if (!accumulate) MatmulOf(a, lda, M, b, b.panel_data(0), p_begin, p_end, c, ldc);
    return;
  }
  const int64_t tiles = (M + kRows - 1) / kRows;
  for (int64_t k0 = 0; k0 < K; k0 += kAtDepth) {
    const int64_t kc = std::min(kAtDepth, K - k0);
    const int64_t whole = M / kRows;
    // Tile by tile, each tile's block written in order. Row by row, one row's stores fell
    // kc * kRows floats apart (4 KB on AVX-512), in one L1 set and 4K-aliased with the loads:
    // a third of the time at M = 768 on a Zen 5.
    for (int64_t t = 0; t < whole; ++t) {
      const float* col = a + k0 * lda + t * kRows;
      float* dst = scratch + t * kc * kRows;
      for (int64_t k = 0; k < kc; ++k)
        for (int i = 0; i < kRows; ++i) dst[k * kRows + i] = col[k * lda + i];
    }
    if (whole < tiles) {
      for (int64_t k = 0; k < kc; ++k) {
        const float* row = a + (k0 + k) * lda;
        float* dst = scratch + whole * kc * kRows + k * kRows;
        for (int i = 0; i < kRows; ++i) dst[i] = whole * kRows + i < M ? row[whole * kRows + i] : 0.0f;
      }
    }
    const bool first = k0 == 0 && !accumulate;
    for (int64_t p = p_begin; p < p_end; ++p) {
      const float* bp = b.panel_data(p) + k0 * NR;
      const int64_t col0 = p * NR;
      const int64_t cols = std::min<int64_t>(NR, b.N - col0);
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t m = t * kRows;
        TileRemainder<kRows, true>(std::min<int64_t>(kRows, M - m), scratch + t * kc * kRows, 0, bp, kc,
                                   c + m * ldc + col0, ldc, first, cols);
      }
    }
  }
}

void MatmulAt(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin, int64_t p_end,
              float* c, int64_t ldc, float* scratch) {
  MatmulAtChains(a, lda, M, b, p_begin, p_end, c, ldc, scratch, false);
}

void MatmulAtContinue(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin, int64_t p_end,
                      float* c, int64_t ldc, float* scratch) {
  MatmulAtChains(a, lda, M, b, p_begin, p_end, c, ldc, scratch, true);
}

// bf16- or q8-stored weights with many rows (prefill): each panel's [kDepth][NR] block is widened
// once into an f32 block in L1 and the f32 tiles run over it, so the widening is paid once per
// block, not once per row tile. The values (for q8 float(q) * scale, the same single rounding),
// and so the chains, are the same.
template <typename TB>
void MatmulWidened(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, const TB* data, int64_t p_begin,
                   int64_t p_end, float* c, int64_t ldc) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t K = b.K, NR = b.panel;
  HWY_ALIGN float block[kDepth * kVectors * (HWY_MAX_BYTES / sizeof(float))];
  for (int64_t p = p_begin; p < p_end; ++p) {
    const TB* bp = data + p * K * NR;
    const float* const ps = b.q8 ? b.panel_scales(p) : nullptr;
    const int64_t col0 = p * NR;
    const int64_t cols = std::min<int64_t>(NR, b.N - col0);
    for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, K - k0);
      for (int64_t i = 0; i < kc * NR; i += N) hn::Store(LoadB(d, bp + k0 * NR + i, ps, i % NR), d, block + i);
      const bool first = k0 == 0;
      int64_t m = 0;
      for (; m + kRows <= M; m += kRows)
        Tile<kRows>(a + m * lda + k0, lda, static_cast<const float*>(block), kc, c + m * ldc + col0, ldc, first, cols);
      if (m < M)
        TileRemainder<kRows - 1>(M - m, a + m * lda + k0, lda, static_cast<const float*>(block), kc,
                                 c + m * ldc + col0, ldc, first, cols);
    }
  }
}

// A q4 byte vector's two rows as f32 vectors: 16 / 8 / 4 bytes (one per column) at p, the low
// nibbles (row k) into lo and the high nibbles (row k + 1) into hi, each the exact small integer
// its 4-bit two's complement value is, so that lo * scale is float(q) * scale, the expanded weight.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// AVX-512: the bytes zero-extended to 32-bit lanes are the indices of a 16-float table of the
// values 0..7, -8..-1; vpermps reads only the low 4 bits of each index, so one permute turns the
// low nibble into its float (no sign extension, no convert) and a shift by 4 then the high one.
HWY_INLINE void Nibbles(DF d, const uint8_t* HWY_RESTRICT p, hn::Vec<DF>& lo, hn::Vec<DF>& hi) {
  static_assert(HWY_MAX_BYTES == 64, "16 lanes of f32");
  (void)d;
  const __m512 values = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1);
  const __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = hn::Vec<DF>{_mm512_permutexvar_ps(x, values)};
  hi = hn::Vec<DF>{_mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), values)};
}
#else
// Sign-extended bytes: shifting left then arithmetically right by 28 gives the low nibble's
// value, an arithmetic shift right by 4 the high one's; both convert exactly.
HWY_INLINE void Nibbles(DF d, const uint8_t* HWY_RESTRICT p, hn::Vec<DF>& lo, hn::Vec<DF>& hi) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<int8_t, DF> d8;
  const auto x = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(p)));
  lo = hn::ConvertTo(d, hn::ShiftRight<28>(hn::ShiftLeft<28>(x)));
  hi = hn::ConvertTo(d, hn::ShiftRight<4>(x));
}
#endif

// One row (decoding) over P full q4 panels at once, rows [k0, k0 + kc) (k0 even): each loaded byte
// vector gives rows k and k + 1 in registers (their values times their group's scale), and the
// row's chains take them in increasing k, exactly as over the widened block. The panels are
// read as P streams from DRAM: each is prefetched kQ4Ahead bytes ahead of its reads, so that the
// loads of the next rows overlap the expansion of these (one prefetch per panel per 64 bytes).
constexpr int64_t kQ4Ahead = 1024;
template <int P>
HWY_INLINE void WideTileQ4(const float* HWY_RESTRICT a, const PackedMatrix& b, int64_t p, int64_t k0, int64_t kc,
                           float* HWY_RESTRICT c, bool first) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t NR = kVectors * N;
  // Accumulator I: panel I / kVectors, vector I % kVectors (tile-inl.hpp).
  const auto at = [&](size_t I) LOCKSTEP_LAMBDA_INLINE { return static_cast<int64_t>(I / kVectors) * NR + static_cast<int64_t>(I % kVectors) * N; };
  const uint8_t* rows[P];
  const float* scales[P];
  for (int q = 0; q < P; ++q) {
    rows[q] = b.panel_data4(p + q) + (k0 / 2) * NR;
    scales[q] = b.panel_scales4(p + q);
  }
  const int64_t pairs = kc / 2;
  WithTile<P * kVectors>(
      [&](auto I) LOCKSTEP_LAMBDA_INLINE { return first ? hn::Zero(d) : hn::LoadU(d, c + at(decltype(I)::value)); },
      [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
        for (int64_t i = 0; i < pairs; ++i) {
          const int64_t kk = k0 + 2 * i;  // kk and kk + 1 share a group
          const auto a0 = hn::Set(d, a[kk]);
          const auto a1 = hn::Set(d, a[kk + 1]);
          if ((i * NR) % 64 == 0)
            for (int q = 0; q < P; ++q) hwy::Prefetch(rows[q] + i * NR + kQ4Ahead);
          const auto fma = [&](hn::Vec<DF>& c_qv, size_t I_) LOCKSTEP_LAMBDA_INLINE {
            const int64_t q = static_cast<int64_t>(I_ / kVectors), v = static_cast<int64_t>(I_ % kVectors);
            hn::Vec<DF> lo, hi;
            Nibbles(d, rows[q] + i * NR + v * N, lo, hi);
            const auto sv = hn::Load(d, scales[q] + (kk / 32) * NR + v * N);
            c_qv = hn::MulAdd(a0, hn::Mul(lo, sv), c_qv);
            c_qv = hn::MulAdd(a1, hn::Mul(hi, sv), c_qv);
          };
          (fma(acc, I), ...);
        }
        if (kc % 2 != 0) {  // K odd: the last row, alone in its byte's low nibble
          const int64_t kk = k0 + kc - 1;
          const auto a0 = hn::Set(d, a[kk]);
          const auto last = [&](hn::Vec<DF>& c_qv, size_t I_) LOCKSTEP_LAMBDA_INLINE {
            const int64_t q = static_cast<int64_t>(I_ / kVectors), v = static_cast<int64_t>(I_ % kVectors);
            hn::Vec<DF> lo, hi;
            Nibbles(d, rows[q] + pairs * NR + v * N, lo, hi);
            c_qv = hn::MulAdd(a0, hn::Mul(lo, hn::Load(d, scales[q] + (kk / 32) * NR + v * N)), c_qv);
          };
          (last(acc, I), ...);
        }
        (hn::StoreU(acc, d, c + at(I)), ...);
      });
}

// The full panels of [p, full_end) in groups of P, P / 2, ... 1 (as WidePanels); returns the
// first panel not done.
template <int P>
HWY_INLINE int64_t WidePanelsQ4(const float* a, const PackedMatrix& b, int64_t p, int64_t full_end, float* c) {
  for (; p + P <= full_end; p += P)
    for (int64_t k0 = 0; k0 < b.K; k0 += kDepth)
      WideTileQ4<P>(a, b, p, k0, std::min(kDepth, b.K - k0), c + p * b.panel, k0 == 0);
  if constexpr (P > 1) p = WidePanelsQ4<P / 2>(a, b, p, full_end, c);
  return p;
}

// q4-stored weights: one row (decoding) in the wide tiles above, straight from the packed bytes;
// otherwise (and a last partial panel) each panel's [kDepth][NR] block is widened once into an
// f32 block in L1, two rows k per loaded byte vector (Nibbles), each value times its group's scale
// (one rounded multiply: the expanded weight), and the f32 tiles run over it. The chains are the
// f32 ones.
void MatmulQ4(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin, int64_t p_end,
              float* c, int64_t ldc) {
  if (M == 1 && b.K > 0) {  // decoding: straight from the packed bytes, the full panels in wide tiles
    p_begin = WidePanelsQ4<kWidePanels>(a, b, p_begin, std::min(p_end, b.N / b.panel), c);
    if (p_begin >= p_end) return;
  }
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t K = b.K, NR = b.panel;
  if (K == 0) {
    for (int64_t m = 0; m < M; ++m) std::fill(c + m * ldc + p_begin * NR, c + m * ldc + std::min(b.N, p_end * NR), 0.0f);
    return;
  }
  static_assert(kDepth % 32 == 0, "a depth block holds whole q4 groups (and so whole row pairs)");
  HWY_ALIGN float block[kDepth * kVectors * (HWY_MAX_BYTES / sizeof(float))];
  for (int64_t p = p_begin; p < p_end; ++p) {
    const uint8_t* bp = b.panel_data4(p);
    const float* ps = b.panel_scales4(p);
    const int64_t col0 = p * NR;
    const int64_t cols = std::min<int64_t>(NR, b.N - col0);
    for (int64_t k0 = 0; k0 < K; k0 += kDepth) {
      const int64_t kc = std::min(kDepth, K - k0);
      for (int64_t k = 0; k < kc; k += 2) {
        const int64_t kk = k0 + k;  // even: kk and kk + 1 share a group
        const float* s = ps + (kk / 32) * NR;
        const uint8_t* row = bp + (kk / 2) * NR;
        for (int64_t v = 0; v < NR; v += N) {
          hn::Vec<DF> lo, hi;
          Nibbles(d, row + v, lo, hi);
          const auto sv = hn::Load(d, s + v);
          hn::Store(hn::Mul(lo, sv), d, block + k * NR + v);
          if (k + 1 < kc) hn::Store(hn::Mul(hi, sv), d, block + (k + 1) * NR + v);
        }
      }
      const bool first = k0 == 0;
      int64_t m = 0;
      for (; m + kRows <= M; m += kRows)
        Tile<kRows>(a + m * lda + k0, lda, static_cast<const float*>(block), kc, c + m * ldc + col0, ldc, first, cols);
      if (m < M)
        TileRemainder<kRows - 1>(M - m, a + m * lda + k0, lda, static_cast<const float*>(block), kc,
                                 c + m * ldc + col0, ldc, first, cols);
    }
  }
}

void Matmul(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
            int64_t p_end, float* c, int64_t ldc) {
  if (b.q4) return MatmulQ4(a, lda, M, b, p_begin, p_end, c, ldc);
  if (b.q8) {
    if (M > 2 && b.K > 0) return MatmulWidened(a, lda, M, b, b.panel_data8(0), p_begin, p_end, c, ldc);
    return MatmulOf(a, lda, M, b, b.panel_data8(0), p_begin, p_end, c, ldc);
  }
  if (b.bf16) {
    if (M > 2 && b.K > 0) return MatmulWidened(a, lda, M, b, b.panel_data16(0), p_begin, p_end, c, ldc);
    return MatmulOf(a, lda, M, b, b.panel_data16(0), p_begin, p_end, c, ldc);
  }
  MatmulOf(a, lda, M, b, b.panel_data(0), p_begin, p_end, c, ldc);
}

void FillMatmul(Kernels& k) {
  k.panel_width = static_cast<int32_t>(kVectors * hn::Lanes(DF()));
  k.row_block = kRows;
  k.at_block = kAtDepth;
  k.decode_panels = std::min(kWidePanels, 4);  // 4 panels: 8 chains of 2 vectors (AVX-512, NEON, SVE); AVX2 3 of 4
  k.matmul = &Matmul;
  k.matmul_at = &MatmulAt;
  k.matmul_at_continue = &MatmulAtContinue;
}

#else  // no hardware FMA: the portable fallback, ref::matmul's loops over the packed layout

void Matmul(const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
            int64_t p_end, float* c, int64_t ldc) {
  MatmulScalar(a, lda, 1, M, b, p_begin, p_end, c, ldc);
}

void FillMatmul(Kernels& k) {
  k.panel_width = 8;
  k.row_block = 1;
  k.at_block = 0;
  k.matmul = &Matmul;
  k.matmul_at = [](const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin, int64_t p_end,
                   float* c, int64_t ldc, float*) { MatmulScalar(a, 1, lda, M, b, p_begin, p_end, c, ldc); };
  k.matmul_at_continue = [](const float* a, int64_t lda, int64_t M, const PackedMatrix& b, int64_t p_begin,
                            int64_t p_end, float* c, int64_t ldc,
                            float*) { MatmulScalar(a, 1, lda, M, b, p_begin, p_end, c, ldc, true); };
}

#endif  // HWY_NATIVE_FMA

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
