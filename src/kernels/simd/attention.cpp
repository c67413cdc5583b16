// One query row of causal attention for one head (ref::attention). Lanes run along independent
// outputs only: along keys j for the scores (keys in blocks of kKeysPerBlock positions, so key j's
// d-th value sits beside key j+1's within a block: kernels.hpp), along d for the weighted sum of
// values. Every score's dot product, the
// softmax denominator and every output's sum over j stay single chains in increasing order.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <utility>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/attention-inl.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/math-inl.hpp"
#include "kernels/simd/tile-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

// At most kKeysPerBlock lanes (a power of two, as every target's lane count is), so that a vector
// of keys starting at a multiple of its lanes lies within one block of the keys' layout.
using DF = hn::CappedTag<float, kKeysPerBlock>;

// Where key j's first dimension sits in the blocked layout (kernels.hpp): dimension d of keys
// [j, j + N) is the N floats at KeyColumn(kt, block_stride, j) + d * kKeysPerBlock, for j a
// multiple of N.
HWY_INLINE const float* KeyColumn(const float* kt, int64_t block_stride, int64_t j) {
  return kt + key_column(j, block_stride);
}

// scores[j0 .. j0 + (U - 1) N + last) = (q . k_j) * scale, U vectors of keys at once for
// independent chains (j0 a multiple of N), the last vector's first `last` lanes only (its other
// lanes read keys at or past n, within n's whole block, and are dropped: neither stored nor in the
// maximum).
template <int U>
HWY_INLINE hn::Vec<DF> Scores(const float* HWY_RESTRICT q, const float* HWY_RESTRICT kt, int64_t block_stride,
                              int64_t j0, int64_t last, int32_t head_dim, hn::Vec<DF> scale, float* scores,
                              hn::Vec<DF> m) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  WithTile<U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    const float* const column[] = {KeyColumn(kt, block_stride, j0 + static_cast<int64_t>(I) * N)...};
    for (int32_t dd = 0; dd < head_dim; ++dd) {
      const auto qd = hn::Set(d, q[dd]);
      const int64_t at = static_cast<int64_t>(dd) * kKeysPerBlock;
      ((acc = hn::MulAdd(qd, hn::LoadU(d, column[I] + at), acc)), ...);
    }
    // The running maximum takes the vectors in increasing u (the order of a maximum changes no bit).
    const auto finish = [&](hn::Vec<DF> a_u, int64_t u) LOCKSTEP_LAMBDA_INLINE {
      const auto s = hn::Mul(a_u, scale);
      if (u + 1 < U || last == N) {
        hn::StoreU(s, d, scores + j0 + u * N);
        m = MaxSkipNaN(m, s);
      } else {
        HWY_ALIGN float part[HWY_MAX_BYTES / sizeof(float)];
        hn::Store(s, d, part);
        std::copy_n(part, last, scores + j0 + u * N);
        m = MaxSkipNaN(m, hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(last)), s,
                                         hn::Set(d, -std::numeric_limits<float>::infinity())));
      }
    };
    (finish(acc, static_cast<int64_t>(I)), ...);
  });
  return m;
}

// Vectors of keys per score tile of one query: as many independent chains as keep the FMA
// pipes busy (two per cycle, four cycles each), within AVX2's 16 registers.
constexpr int kScoreVectors = 8;

// f(std::integral_constant<int, count>) for a count in [1, Max] known only at run time (a
// tile's size), each count its own instantiation.
template <int Max, class F>
HWY_INLINE decltype(auto) ForCount(int64_t count, const F& f) {
  if constexpr (Max > 1) {
    if (count >= Max) return f(std::integral_constant<int, Max>());
    return ForCount<Max - 1>(count, f);
  } else {
    return f(std::integral_constant<int, 1>());
  }
}

// out_i[d] = out_i[d] / l[i] for nq rows of head_dim (row i at out + i * out_stride): each
// output's one division by its query's softmax denominator.
HWY_INLINE void DivideRows(float* HWY_RESTRICT out, int64_t out_stride, const float* l, int nq, int32_t head_dim) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int i = 0; i < nq; ++i) {
    float* o = out + i * out_stride;
    const auto l_v = hn::Set(d, l[i]);
    int32_t dd = 0;
    for (; dd + N <= head_dim; dd += static_cast<int32_t>(N)) hn::StoreU(hn::Div(hn::LoadU(d, o + dd), l_v), d, o + dd);
    for (; dd < head_dim; ++dd) o[dd] = o[dd] / l[i];
  }
}

constexpr int64_t kFloatsPerLine = 64 / sizeof(float);

// Asks the CPU for the line holding base[offset] ahead of its use. The kernels ask for the next
// block of keys or values: a head's 16 positions in a block are one run (4 KB at head_dim 64) and
// the next block's run starts in another page, where the CPU's stream prefetchers (which stop at
// page boundaries) start cold. The address is formed as an integer: past the last block it lies
// outside the cache, and a prefetch there is dropped by the CPU.
HWY_INLINE void AskForLine(const float* base, int64_t offset) {
  __builtin_prefetch(reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(base) +
                                                   static_cast<uintptr_t>(offset) * sizeof(float)));
}

// out[d0 .. d0 + U N) = sum_j e_j v_j[d] as U vectors of independent chains over j, unscaled
// (value j at v + value_row(j, ldv, v_block_stride)). With `l`, the first tile also runs the
// softmax denominator's chain, *l = sum of e_j in increasing j from +0, beside its own (both are
// latency-bound chains of one add or fma per key).
template <int U>
HWY_INLINE void WeightedSum(const float* HWY_RESTRICT e, const float* HWY_RESTRICT v, int64_t ldv,
                            int64_t v_block_stride, int64_t n, int32_t d0, float* HWY_RESTRICT out, float* l) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  float sum = 0.0f;
  WithTile<U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int64_t j = 0; j < n;) {  // run by run of kKeysPerBlock rows
      const int64_t run_end = std::min(n, j + kKeysPerBlock);
      const float* row = v + value_row(j, ldv, v_block_stride) + d0;
      for (; j < run_end; ++j, row += ldv) {
        // This row's lines in the next block (each value is read once here): BM_WindowDecode/1/4096
        // 1.10x on Zen 5 (351.5 -> 317 ms, medians of 10 alternating rounds); the keys' lines
        // asked for the same way ran 0.93x.
        for (int64_t at = 0; at < U * N; at += kFloatsPerLine) AskForLine(row, v_block_stride + at);
        const auto ej = hn::Set(d, e[j]);
        if (l) sum = sum + e[j];
        ((acc = hn::MulAdd(ej, hn::LoadU(d, row + static_cast<int64_t>(I) * N), acc)), ...);
      }
    }
    (hn::StoreU(acc, d, out + d0 + static_cast<int64_t>(I) * N), ...);
  });
  if (l) *l = sum;
}

void Attention(const float* HWY_RESTRICT q, const float* HWY_RESTRICT kt, int64_t block_stride,
               const float* HWY_RESTRICT v, int64_t ldv, int64_t v_block_stride, int64_t n, int32_t head_dim,
               float scale, float* HWY_RESTRICT out, float* HWY_RESTRICT scores) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto scale_v = hn::Set(d, scale);
  auto mv = hn::Set(d, -std::numeric_limits<float>::infinity());
  // Tiles of kScoreVectors vectors of keys, then one of the vectors left, the last of them
  // partial (its block is whole, so its lanes past n are there to read).
  int64_t j = 0;
  while (j < n) {
    const int64_t vectors = std::min<int64_t>(kScoreVectors, (n - j + N - 1) / N);
    const int64_t last = std::min(N, n - j - (vectors - 1) * N);
    mv = ForCount<kScoreVectors>(vectors, [&](auto u) { return Scores<decltype(u)::value>(q, kt, block_stride, j, last, head_dim, scale_v, scores, mv); });
    j += (vectors - 1) * N + last;
  }
  const float m = ReduceMaxSkipNaN(d, mv, -std::numeric_limits<float>::infinity());

  // e_j = exp(s_j - m) in place; l = sum of e_j in increasing j.
  const auto m_v = hn::Set(d, m);
  j = 0;
  for (; j + N <= n; j += N) hn::StoreU(ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, scores + j), m_v)), d, scores + j);
  if (j < n) {  // the partial vector through a buffer (its lanes past n are zeros, then dropped)
    HWY_ALIGN float part[HWY_MAX_BYTES / sizeof(float)] = {};
    std::copy(scores + j, scores + n, part);
    hn::Store(ExpOfNonPositive(d, hn::Sub(hn::Load(d, part), m_v)), d, part);
    std::copy_n(part, n - j, scores + j);
  }

  // The weighted sums (tiles of four vectors of d, then two, then one), l's chain beside the
  // first, then the scalar rest, and the division by l.
  float l = 0.0f;
  float* l_at = &l;
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N), l_at = nullptr)
    WeightedSum<4>(scores, v, ldv, v_block_stride, n, d0, out, l_at);
  for (; d0 + 2 * N <= head_dim; d0 += static_cast<int32_t>(2 * N), l_at = nullptr)
    WeightedSum<2>(scores, v, ldv, v_block_stride, n, d0, out, l_at);
  for (; d0 + N <= head_dim; d0 += static_cast<int32_t>(N), l_at = nullptr)
    WeightedSum<1>(scores, v, ldv, v_block_stride, n, d0, out, l_at);
  for (; d0 < head_dim; ++d0) {
    float acc = 0.0f;
    for (j = 0; j < n; ++j) acc = ref::fma_f32(scores[j], v[value_row(j, ldv, v_block_stride) + d0], acc);
    out[d0] = acc;
  }
  if (l_at)  // head_dim below one vector: l's chain alone
    for (j = 0; j < n; ++j) l = l + scores[j];
  DivideRows(out, head_dim, &l, 1, head_dim);
}

// Vectors per score tile for QB <= kSharedQueries queries: QB * 4 accumulators, at most 12 of
// AVX2's 16 registers, 24 of AVX-512's 32.
constexpr int kTileVectors = 4;

// Scores of QB queries at once over U vectors of keys from j0 (a multiple of N): acc[i][u] lanes
// j0 + u N + lane, each a chain over d of q_i[d] * k_j[d] as Scores computes it; the keys' loads
// are shared. Query i's vector u goes to out + i * ld_out + u N.
template <int QB, int U>
HWY_INLINE void ScoresMulti(const float* HWY_RESTRICT q, int64_t q_stride, const float* HWY_RESTRICT kt,
                            int64_t block_stride, int64_t j0, int32_t head_dim, hn::Vec<DF> scale, float* out,
                            int64_t ld_out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float* column[U];
  for (int u = 0; u < U; ++u) column[u] = KeyColumn(kt, block_stride, j0 + u * N);
  // Accumulator I: query I / U, vector of keys I % U (tile-inl.hpp).
  WithTile<QB * U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int32_t dd = 0; dd < head_dim; ++dd) {
      const int64_t at = static_cast<int64_t>(dd) * kKeysPerBlock;
      // Each key vector and each query's value is loaded once (the repeats fold away).
      const auto fma = [&](hn::Vec<DF>& a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
        const auto qd = hn::Set(d, q[static_cast<int64_t>(I_ / U) * q_stride + dd]);
        a_iu = hn::MulAdd(qd, hn::LoadU(d, column[I_ % U] + at), a_iu);
      };
      (fma(acc, I), ...);
    }
    (hn::StoreU(hn::Mul(acc, scale), d, out + static_cast<int64_t>(I / U) * ld_out + static_cast<int64_t>(I % U) * N),
     ...);
  });
}

// scores_i[j] (row i at scores + i * ld_scores) = (q_i . k_j) * scale for j < n[i], QB queries
// with n ascending, each dot the chain ScoresMulti computes: tiles of kTileVectors vectors of
// keys, then single vectors, then the last partial vector whole (its block is) through a buffer.
// Scores of keys at or past a query's own n, up to n[QB - 1], may be written; the caller ignores
// them.
template <int QB>
HWY_INLINE void AllScores(const float* HWY_RESTRICT q, int64_t q_stride, const int64_t* n,
                          const float* HWY_RESTRICT kt, int64_t block_stride, int32_t head_dim, hn::Vec<DF> scale,
                          float* scores, int64_t ld_scores) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n_max = n[QB - 1];
  int64_t j = 0;
  constexpr int U = kTileVectors;
  for (; j + U * N <= n_max; j += U * N)
    ScoresMulti<QB, U>(q, q_stride, kt, block_stride, j, head_dim, scale, scores + j, ld_scores);
  for (; j + N <= n_max; j += N)
    ScoresMulti<QB, 1>(q, q_stride, kt, block_stride, j, head_dim, scale, scores + j, ld_scores);
  if (j < n_max) {
    HWY_ALIGN float tail[QB * kKeysPerBlock];
    ScoresMulti<QB, 1>(q, q_stride, kt, block_stride, j, head_dim, scale, tail, N);
    for (int i = 0; i < QB; ++i)
      for (int64_t jj = j; jj < n[i]; ++jj) scores[i * ld_scores + jj] = tail[i * N + jj - j];
  }
}

// The QB queries' scalar chains over keys [c0, c1), interleaved so that their latencies overlap
// (each is alone latency-bound: one add or fma per 3-4 cycles). n ascending. acc_i (in and out)
// continues as acc = step(acc, i, j) for j in [c0, min(c1, n_i)) in increasing j, so that spans
// taken in order run each query's one chain.
template <int QB, class Step>
HWY_INLINE void ChainsOver(const int64_t* n, int64_t c0, int64_t c1, float* acc_io, const Step& step) {
  float acc[QB];
  for (int i = 0; i < QB; ++i) acc[i] = acc_io[i];
  const int64_t shared = std::min(c1, n[0]);
  for (int64_t j = c0; j < shared; ++j)
    for (int i = 0; i < QB; ++i) acc[i] = step(acc[i], i, j);
  for (int i = 1; i < QB; ++i)
    for (int64_t j = std::max(c0, n[0]); j < std::min(c1, n[i]); ++j) acc[i] = step(acc[i], i, j);
  for (int i = 0; i < QB; ++i) acc_io[i] = acc[i];
}

// The chains over every key, j < n_i, from +0.
template <int QB, class Step>
HWY_INLINE void Chains(const int64_t* n, float* out, const Step& step) {
  for (int i = 0; i < QB; ++i) out[i] = 0.0f;
  ChainsOver<QB>(n, 0, n[QB - 1], out, step);
}

// Attention for QB queries of one key/value head, query i reading keys [0, n[i]) with
// n[0] <= n[1] <= ... (consecutive positions of one row, or the heads of one group at one
// position). Every value is the single-query kernel's: scores, max, exponentials and l per
// query, then the weighted sums over the keys all queries read, shared, and each query's own
// remaining keys after them in the same order. scratch: QB * n[QB - 1] floats.
template <int QB>
void AttentionMulti(const float* HWY_RESTRICT q, int64_t q_stride, const int64_t* n, const float* HWY_RESTRICT kt,
                    int64_t block_stride, const float* HWY_RESTRICT v, int64_t ldv, int64_t v_block_stride,
                    int32_t head_dim, float scale, float* HWY_RESTRICT out, int64_t out_stride,
                    float* HWY_RESTRICT scratch) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n_max = n[QB - 1], n_min = n[0];
  const int64_t ld = n_max;  // scratch row stride
  const auto scale_v = hn::Set(d, scale);
  AllScores<QB>(q, q_stride, n, kt, block_stride, head_dim, scale_v, scratch, ld);
  float l[QB];
  for (int i = 0; i < QB; ++i) {
    float* s = scratch + i * ld;
    // max over [0, n_i), then e = exp(s - m) and l = chain of e.
    auto mv = hn::Set(d, -std::numeric_limits<float>::infinity());
    int64_t jj = 0;
    for (; jj + N <= n[i]; jj += N) mv = MaxSkipNaN(mv, hn::LoadU(d, s + jj));
    float m = -std::numeric_limits<float>::infinity();
    for (; jj < n[i]; ++jj) m = ref::max_skip_nan(m, s[jj]);
    m = ReduceMaxSkipNaN(d, mv, m);
    const auto m_v = hn::Set(d, m);
    for (jj = 0; jj + N <= n[i]; jj += N) hn::StoreU(ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, s + jj), m_v)), d, s + jj);
    for (; jj < n[i]; ++jj) s[jj] = ref::exp_f32(s[jj] - m);
  }
  Chains<QB>(n, l, [&](float acc, int i, int64_t j) { return acc + scratch[i * ld + j]; });
  // Weighted sums: keys [0, n_min) for all queries at once, then each query's own tail.
  WeightedRows<QB>(scratch, ld, 1, v, ldv, v_block_stride, 0, n_min, head_dim, true, out, out_stride);
  for (int i = 1; i < QB; ++i)
    if (n[i] > n_min)
      WeightedRows<1>(scratch + i * ld, ld, 1, v, ldv, v_block_stride, n_min, n[i], head_dim, false,
                      out + i * out_stride, out_stride);
  DivideRows(out, out_stride, l, QB, head_dim);
}

// The tiled kernel's span of keys: kTileSpanBytes of one head's keys or values, a multiple of
// kTileVectors vectors, which stays in L1 while every group of the tile's queries passes over it.
// Both are read in place: each of the layouts' blocks of kKeysPerBlock positions holds a head's
// keys, and its values, as one contiguous run (head_dim * 64 bytes), which spreads over the L1
// sets evenly (kernels.hpp). 16 KB fits an L1 of 32 KB with the span's scores beside it. AVX-512's
// lanes tile takes 32 KB, so that its groups of queries load and store their accumulators half as
// often: BM_WindowAttention/1/4096/48 1.02-1.026x on Zen 5 (L1 48 KB; medians of 20-25 alternating
// rounds) and 1.02x on Zen 4 (L1 32 KB; 273.7 -> 268 ms, three alternating rounds), no change at
// head_dim 32. AVX2's tile, whose 16 groups of 3 queries each re-read the span from L1, ran 0.986x
// with 32 KB on Zen 5, so keeps 16 KB.
#if HWY_TARGET <= HWY_AVX3
constexpr int64_t kTileSpanBytes = 32 << 10;
#else
constexpr int64_t kTileSpanBytes = 16 << 10;
#endif

int64_t TileSpan(int32_t head_dim) {
  const int64_t tile = kTileVectors * static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t keys = kTileSpanBytes / static_cast<int64_t>(sizeof(float)) / std::max<int32_t>(1, head_dim);
  return std::max<int64_t>(tile, keys / tile * tile);
}

// Queries per register tile of the tiled kernel: 6 where there are 32 vector registers
// (AVX-512: 24 accumulators of 6 queries x 4 vectors, each loaded key or value vector used 6
// times), else 3 (12 of AVX2's 16).
constexpr int kGroupQueries = HWY_MAX_BYTES >= 64 ? 6 : 3;

// The weighted sums of QB queries (n ascending) over the span of values [c0, c1), read in place
// (value j at v + value_row(j, ldv, v_block_stride)): the keys all of them read, together, then
// each one's own after them, so that each output's chain runs in increasing j. The first span
// starts the chains from +0; the others continue them from out (exact round trips). Query i's
// exponential of key j at s[i * s_query + j * s_key].
template <int QB>
HWY_INLINE void SpanValues(const float* s, int64_t s_query, int64_t s_key, const int64_t* n, int64_t c0, int64_t c1,
                           const float* v, int64_t ldv, int64_t v_block_stride, int32_t head_dim, float* out,
                           int64_t out_stride) {
  const int64_t shared = std::min(c1, n[0]);
  if (shared > c0)
    WeightedRows<QB>(s, s_query, s_key, v, ldv, v_block_stride, c0, shared, head_dim, c0 == 0, out, out_stride);
  for (int i = 1; i < QB; ++i) {
    const int64_t b = std::max(c0, n[0]), e = std::min(c1, n[i]);
    if (e > b)
      WeightedRows<1>(s + i * s_query, s_query, s_key, v, ldv, v_block_stride, b, e, head_dim, false,
                      out + i * out_stride, out_stride);
  }
}

#if HWY_TARGET <= HWY_AVX3
// AVX-512's tile: the queries in lanes. Its 32 registers hold a register tile of up to three
// vectors of 16 queries by 8 keys (24 accumulators) whose operands are a vector of the queries'
// d-th values (the tile's queries transposed once into qt) and key j's d-th value broadcast;
// each score is still the chain over d of q_i[d] * k_j[d], then times the scale. The scores lie
// key by key, [key][query], so that a query's running maximum, its exponentials and its l chain
// run in its lane: one vector operation per key for 16 queries, with no transpose. A query's lane
// at or past its own n takes no part: -inf into the maximum, +0 into l (which leaves a sum of
// exponentials as it is: it is never -0), and the weighted sums read only keys below n.
// (Against the per-query tile on AVX-512, BM_WindowAttention: 1.14x at head_dim 32, 1.06x at
// 64, best of four alternating rounds; with AVX2's 16 registers the broadcasts outweigh the
// saving, 0.93-0.96x, so AVX2 keeps the tile below.)
constexpr int64_t kLanes = 16;

// Query vectors g of a tile, each 16 lanes (lanes past nq pad with n = 0: their lanes compute
// from zero queries and nothing reads them).
struct LaneQueries {
  int vectors = 0;
  int32_t n[kMaxTileQueries];      // each lane's n, 0 past nq
  int64_t least[kMaxTileQueries / kLanes];  // vector g's smallest n: keys below it count in every lane
  int64_t most[kMaxTileQueries / kLanes];   // vector g's largest n: keys from it on count in none
};

// The lanes of query vector g that read key j (j < n).
HWY_INLINE hn::Mask<DF> ReadsKey(const LaneQueries& lq, int g, int64_t j) {
  const hn::RebindToSigned<DF> di;
  return hn::RebindMask(DF(), hn::Lt(hn::Set(di, static_cast<int32_t>(j)), hn::LoadU(di, lq.n + g * kLanes)));
}

// Keys per register tile for QV query vectors: 8 (up to 24 accumulators), 4 for four vectors.
template <int QV>
constexpr int kLaneKeys = QV == 4 ? 4 : 8;

// Scores of QV query vectors (from vector g0) against keys [j0, j0 + U): st[j][g] =
// (q . k_j) * scale for the lanes of vector g, and the vectors' running maxima m[g] (in and out)
// folded with them, lanes at or past their n skipped. qt: [head_dim][ld] queries, st: [key][ld].
template <int QV, int U>
HWY_INLINE void LaneScores(const float* HWY_RESTRICT qt, int64_t ld, const LaneQueries& lq, int g0,
                           const float* HWY_RESTRICT kt, int64_t block_stride, int64_t j0, int32_t head_dim,
                           hn::Vec<DF> scale, float* HWY_RESTRICT st, hn::Vec<DF>* m) {
  const DF d;
  const float* column[U];
  for (int u = 0; u < U; ++u) column[u] = KeyColumn(kt, block_stride, j0 + u);
  // Accumulator I: key I / QV, query vector g0 + I % QV (tile-inl.hpp).
  WithTile<QV * U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int32_t dd = 0; dd < head_dim; ++dd) {
      const float* qd = qt + static_cast<int64_t>(dd) * ld + g0 * kLanes;
      const int64_t at = static_cast<int64_t>(dd) * kKeysPerBlock;
      // Dimension dd's line of the block after j0's: BM_WindowAttention at 4096 keys 1.025x (l768)
      // and 1.04x (s256) on Zen 5 (medians of 20-30 alternating rounds).
      AskForLine(kt, key_column(j0 + kKeysPerBlock, block_stride) + at);
      // Each query vector and each key's value is loaded once (the repeats fold away).
      const auto fma = [&](hn::Vec<DF>& a, size_t I_) LOCKSTEP_LAMBDA_INLINE {
        a = hn::MulAdd(hn::LoadU(d, qd + static_cast<int64_t>(I_ % QV) * kLanes), hn::Set(d, column[I_ / QV][at]), a);
      };
      (fma(acc, I), ...);
    }
    // The maxima in registers for the tile (indexed by constants), back to m once.
    hn::Vec<DF> mt[QV];
    for (int v = 0; v < QV; ++v) mt[v] = m[g0 + v];
    const auto finish = [&](hn::Vec<DF> a, size_t I_) LOCKSTEP_LAMBDA_INLINE {
      const int g = g0 + static_cast<int>(I_ % QV);
      const int64_t j = j0 + static_cast<int64_t>(I_ / QV);
      const auto s = hn::Mul(a, scale);
      hn::StoreU(s, d, st + j * ld + g * kLanes);
      auto& mv = mt[I_ % QV];
      if (j < lq.least[g]) {
        mv = MaxSkipNaN(mv, s);
      } else {
        mv = MaxSkipNaN(mv, hn::IfThenElse(ReadsKey(lq, g, j), s, hn::Set(d, -std::numeric_limits<float>::infinity())));
      }
    };
    (finish(acc, I), ...);
    for (int v = 0; v < QV; ++v) m[g0 + v] = mt[v];
  });
}

// The scores of keys [c0, c1) for the query vectors from g0 on (the ones before it are done
// with these keys): register tiles of kLaneKeys keys, then one of the keys left.
template <int QV>
HWY_INLINE void LaneSpanScores(const float* qt, int64_t ld, const LaneQueries& lq, int g0, const float* kt,
                               int64_t block_stride, int64_t c0, int64_t c1, int32_t head_dim, hn::Vec<DF> scale,
                               float* st, hn::Vec<DF>* m) {
  constexpr int U = kLaneKeys<QV>;
  int64_t j = c0;
  for (; j + U <= c1; j += U) LaneScores<QV, U>(qt, ld, lq, g0, kt, block_stride, j, head_dim, scale, st, m);
  if (j < c1)
    ForCount<U - 1>(c1 - j, [&](auto u) {
      LaneScores<QV, decltype(u)::value>(qt, ld, lq, g0, kt, block_stride, j, head_dim, scale, st, m);
    });
}

// Attention for a tile of 3 < nq <= kMaxTileQueries queries of one key/value head, query i
// reading keys [0, n[i]) with 1 <= n[0] <= n[1] <= ... (a run of consecutive positions of one
// row in prefill); every value is the single-query kernel's, as for the tile of other targets:
// each score one chain over d, per query the max, the exponentials and l in increasing j, then
// each output's weighted sum in increasing j and one division. Keys and values go by spans of
// TileSpan(head_dim) read in place; the first pass computes the span's scores and
// folds them into the maxima, the second takes the span's exponentials and l, then the weighted
// sums (groups of kGroupQueries queries, each exponential a broadcast from its key's row).
// scratch: QueriesScratch(nq, n_max, head_dim).
void AttentionTile(const float* HWY_RESTRICT q, int64_t q_stride, const int64_t* n, int nq, const float* HWY_RESTRICT kt,
                   int64_t block_stride, const float* HWY_RESTRICT v, int64_t ldv, int64_t v_block_stride,
                   int32_t head_dim, float scale, float* HWY_RESTRICT out, int64_t out_stride,
                   float* HWY_RESTRICT scratch) {
  const DF d;
  using V = hn::Vec<DF>;
  const int64_t n_max = n[nq - 1], KB = TileSpan(head_dim);
  LaneQueries lq;
  lq.vectors = (nq + static_cast<int>(kLanes) - 1) / static_cast<int>(kLanes);
  const int64_t ld = lq.vectors * kLanes;
  for (int i = 0; i < ld; ++i) lq.n[i] = i < nq ? static_cast<int32_t>(n[i]) : 0;
  for (int g = 0; g < lq.vectors; ++g) {
    lq.least[g] = n[g * kLanes];
    lq.most[g] = n[std::min<int64_t>(nq, (g + 1) * kLanes) - 1];
  }
  float* qt = scratch;             // [head_dim][ld]: the queries transposed, zero past nq
  float* st = scratch + head_dim * ld;  // [n_max][ld]: scores, then exponentials
  // The queries transposed 16 x 16 at a time (each block's 16 rows loaded as whole vectors,
  // which also keeps many of their lines on the way from memory at once); dimensions past the
  // last whole 16 one float at a time.
  int32_t d_whole = 0;
  for (; d_whole + kLanes <= head_dim; d_whole += static_cast<int32_t>(kLanes)) {
    for (int g = 0; g < lq.vectors; ++g) {
      __m512 r[kLanes], c[kLanes];
      for (int i = 0; i < kLanes; ++i) {
        const int64_t row = g * kLanes + i;
        r[i] = row < nq ? hn::LoadU(d, q + row * q_stride + d_whole).raw : hn::Zero(d).raw;
      }
      TransposeSquare(r, c);
      for (int k = 0; k < kLanes; ++k) hn::StoreU(V{c[k]}, d, qt + (d_whole + k) * ld + g * kLanes);
    }
  }
  for (int64_t i = 0; i < ld; ++i)
    for (int32_t dd = d_whole; dd < head_dim; ++dd) qt[dd * ld + i] = i < nq ? q[i * q_stride + dd] : 0.0f;
  const auto scale_v = hn::Set(d, scale);
  // Each vector's running maxima and l chains (arrays of vectors: this tile is x86 only, where a
  // vector has a size; tile-inl.hpp).
  V m[kMaxTileQueries / kLanes], l[kMaxTileQueries / kLanes];
  for (int g = 0; g < lq.vectors; ++g) {
    m[g] = hn::Set(d, -std::numeric_limits<float>::infinity());
    l[g] = hn::Zero(d);
  }
  // The first query vector some of whose lanes still read key j.
  const auto first_vector = [&](int64_t j) {
    int g = 0;
    while (lq.most[g] <= j) ++g;
    return g;
  };
  for (int64_t c0 = 0; c0 < n_max; c0 += KB) {
    // Key tiles up to the diagonal vector by vector: the keys a vector reads, with the ones after it.
    for (int64_t j = c0, c1 = std::min(n_max, c0 + KB); j < c1;) {
      const int g0 = first_vector(j);
      const int64_t e = std::min(c1, lq.most[g0]);
      ForCount<kMaxTileQueries / kLanes>(lq.vectors - g0, [&](auto qv) {
        LaneSpanScores<decltype(qv)::value>(qt, ld, lq, g0, kt, block_stride, j, e, head_dim, scale_v, st, m);
      });
      j = e;
    }
  }
  for (int64_t c0 = 0; c0 < n_max; c0 += KB) {
    const int64_t c1 = std::min(n_max, c0 + KB);
    // e = exp(s - m) in place and l's chains, vector by vector in increasing j: the keys every
    // lane reads, then the ones some lanes read (the others' lanes give +0); none past the last.
    for (int g = first_vector(c0); g < lq.vectors; ++g) {
      const int64_t end = std::min(c1, lq.most[g]), all = std::clamp(lq.least[g], c0, end);
      const V m_g = m[g];
      V l_g = l[g];
      int64_t j = c0;
      for (float* at = st + j * ld + g * kLanes; j < all; ++j, at += ld) {
        const V e = ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, at), m_g));
        hn::StoreU(e, d, at);
        l_g = hn::Add(l_g, e);
      }
      for (float* at = st + j * ld + g * kLanes; j < end; ++j, at += ld) {
        const V e = hn::IfThenElseZero(ReadsKey(lq, g, j), ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, at), m_g)));
        hn::StoreU(e, d, at);
        l_g = hn::Add(l_g, e);
      }
      l[g] = l_g;
    }
    for (int g0 = 0; g0 < nq; g0 += kGroupQueries) {
      const int count = std::min(kGroupQueries, nq - g0);
      if (n[g0 + count - 1] <= c0) continue;
      float* oi = out + g0 * out_stride;
      ForCount<kGroupQueries>(count, [&](auto qb) {
        SpanValues<decltype(qb)::value>(st + g0, 1, ld, n + g0, c0, c1, v, ldv, v_block_stride, head_dim, oi,
                                        out_stride);
      });
    }
  }
  HWY_ALIGN float l_all[kMaxTileQueries];
  for (int g = 0; g < lq.vectors; ++g) hn::Store(l[g], d, l_all + g * kLanes);
  DivideRows(out, out_stride, l_all, nq, head_dim);
}

int64_t QueriesScratch(int nq, int64_t n_max, int32_t head_dim) {
  if (nq <= 3) return nq * n_max;
  const int64_t lanes = (std::min(nq, kMaxTileQueries) + kLanes - 1) / kLanes * kLanes;
  return lanes * (n_max + head_dim);
}

#else

// A row of the tiled kernel's scores: n_max rounded up to whole vectors.
int64_t ScoreRow(int64_t n_max) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  return (n_max + N - 1) / N * N;
}

// Scores of QB queries against keys [c0, c1) (c0 a multiple of N): s_i[j] for j in [c0, c1
// rounded up to whole vectors), the lanes past c1 from keys of c1's whole block, ignored by the
// caller.
template <int QB>
HWY_INLINE void BlockScores(const float* q, int64_t q_stride, const float* kt, int64_t block_stride, int64_t c0,
                            int64_t c1, int32_t head_dim, hn::Vec<DF> scale, float* s, int64_t ld_s) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  constexpr int U = kTileVectors;
  int64_t j = c0;
  for (; j + U * N <= c1; j += U * N)
    ScoresMulti<QB, U>(q, q_stride, kt, block_stride, j, head_dim, scale, s + j, ld_s);
  for (; j < c1; j += N) ScoresMulti<QB, 1>(q, q_stride, kt, block_stride, j, head_dim, scale, s + j, ld_s);
}

#if LOCKSTEP_HAS_SQUARE_TRANSPOSE

// The rows' sums with the rows in lanes, over columns [c0, c1) (c0 a multiple of N): sums[i]
// (in and out) continues as the chain over j in [c0, min(c1, n[i])) of rows[i * ld + j], in
// increasing j, for N rows (N the vector's lanes, n ascending); spans taken in order from +0 run
// each row's one chain. Each block of N x N values is transposed (x86 shuffles: 64 on AVX-512,
// 24 on AVX2) so that column j is one vector, lane i row i's value, and the N chains take one
// vector add per j instead of N scalar adds and loads. Lanes at or past a row's n add +0, which
// leaves its sum as it is (a sum of exponentials is never -0). Reads rows up to min(c1, n[N - 1])
// rounded up to a whole vector (within a score row's length, ScoreRow).
HWY_INLINE void RowSumsInLanes(const float* HWY_RESTRICT rows, int64_t ld, const int64_t* n, int64_t c0, int64_t c1,
                               float* HWY_RESTRICT sums) {
  const DF d;
  using V = hn::Vec<DF>;
  constexpr int N = static_cast<int>(hn::MaxLanes(DF()));
  static_assert(N == 16 || N == 8);
  V sum = hn::LoadU(d, sums);
  const int64_t end = std::min(c1, n[N - 1]);
  for (int64_t j0 = c0; j0 < end; j0 += N) {
    decltype(V().raw) r[N], c[N];  // rows, then columns
    for (int i = 0; i < N; ++i) {
      V row = hn::LoadU(d, rows + i * ld + j0);
      if (j0 + N > n[i])
        row = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(std::max<int64_t>(0, n[i] - j0))), row);
      r[i] = row.raw;
    }
    TransposeSquare(r, c);
    for (int j = 0; j < N; ++j) sum = hn::Add(sum, V{c[j]});
  }
  hn::StoreU(sum, d, sums);
}
#endif

// m (in and out, a vector of running maxima) folded with row[j] for j in [c0, e) (c0 a multiple
// of N), NaN skipped; the last vector's lanes at or past e are left out. Reads up to e rounded up
// to a whole vector.
HWY_INLINE hn::Vec<DF> RowMax(const float* HWY_RESTRICT row, int64_t c0, int64_t e, hn::Vec<DF> m) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t j = c0;
  for (; j + N <= e; j += N) m = MaxSkipNaN(m, hn::LoadU(d, row + j));
  if (j < e)
    m = MaxSkipNaN(m, hn::IfThenElse(hn::FirstN(d, static_cast<size_t>(e - j)), hn::LoadU(d, row + j),
                                     hn::Set(d, -std::numeric_limits<float>::infinity())));
  return m;
}

// row[j] = exp(row[j] - m) for j in [c0, e), c0 a multiple of N.
HWY_INLINE void RowExp(float* HWY_RESTRICT row, int64_t c0, int64_t e, float m) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto m_v = hn::Set(d, m);
  int64_t j = c0;
  for (; j + N <= e; j += N) hn::StoreU(ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, row + j), m_v)), d, row + j);
  for (; j < e; ++j) row[j] = ref::exp_f32(row[j] - m);
}

// Attention for a tile of nq > 3 queries of one key/value head, query i reading keys [0, n[i])
// with 1 <= n[0] <= n[1] <= ... (a run of consecutive positions of one row in prefill). Every
// value is the single-query kernel's: each score one chain over d, then per query the max, the
// exponentials and l in increasing j, then each output's weighted sum in increasing j and one
// division. The keys and values go by spans of TileSpan(head_dim), read in place and from L1 by
// every group of queries, so the window's keys and values stream from memory once per tile
// rather than once per group. Two passes over the scores: the first computes them span by span
// and folds each span's into the queries' maxima while it is in L1; the second, again span by
// span, takes the span's exponentials, continues the l chains and the weighted sums over it, all
// three reading it from L1. scratch:
// QueriesScratch(nq, n_max, head_dim).
void AttentionTile(const float* HWY_RESTRICT q, int64_t q_stride, const int64_t* n, int nq, const float* HWY_RESTRICT kt,
                   int64_t block_stride, const float* HWY_RESTRICT v, int64_t ldv, int64_t v_block_stride,
                   int32_t head_dim, float scale, float* HWY_RESTRICT out, int64_t out_stride,
                   float* HWY_RESTRICT scratch) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t n_max = n[nq - 1], KB = TileSpan(head_dim), ld = ScoreRow(n_max);
  float* s = scratch;  // [nq][ld]: scores, then exponentials
  const auto scale_v = hn::Set(d, scale);
  // Query i's running maxima, a vector at maxima + i * N (the order of a maximum changes no bit).
  HWY_ALIGN float maxima[kMaxTileQueries * kKeysPerBlock];
  for (int i = 0; i < nq; ++i) hn::Store(hn::Set(d, -std::numeric_limits<float>::infinity()), d, maxima + i * N);
  // Scores, span by span of keys; a group of queries none of whose keys reach the span skips it.
  for (int64_t c0 = 0; c0 < n_max; c0 += KB) {
    for (int i0 = 0; i0 < nq; i0 += kGroupQueries) {
      const int count = std::min(kGroupQueries, nq - i0);
      const int64_t c1 = std::min({n[i0 + count - 1], c0 + KB, n_max});
      if (c1 <= c0) continue;
      const float* qi = q + i0 * q_stride;
      float* si = s + i0 * ld;
      ForCount<kGroupQueries>(count, [&](auto qb) { BlockScores<decltype(qb)::value>(qi, q_stride, kt, block_stride, c0, c1, head_dim, scale_v, si, ld); });
      for (int i = i0; i < i0 + count; ++i)
        if (n[i] > c0)
          hn::Store(RowMax(s + i * ld, c0, std::min(c1, n[i]), hn::Load(d, maxima + i * N)), d, maxima + i * N);
    }
  }
  float m_all[kMaxTileQueries], l_all[kMaxTileQueries];
  for (int i = 0; i < nq; ++i) {
    m_all[i] = ReduceMaxSkipNaN(d, hn::Load(d, maxima + i * N), -std::numeric_limits<float>::infinity());
    l_all[i] = 0.0f;
  }
  const auto e_of = [&](float acc, int i, int64_t j) { return acc + s[i * ld + j]; };
  // Span by span: e = exp(s - m) in place, then l's chains (on x86 a vector's lanes of queries
  // at once, RowSumsInLanes; else, and for the queries left, eight queries' chains interleaved,
  // each alone waiting an add's latency per step, then four, two, one), then the weighted sums.
  for (int64_t c0 = 0; c0 < n_max; c0 += KB) {
    const int64_t c1 = std::min(n_max, c0 + KB);
    int first = 0;  // the first query reading the span
    while (n[first] <= c0) ++first;
    for (int i = first; i < nq; ++i)
      RowExp(s + i * ld, c0, std::min(c1, n[i]), m_all[i]);
    int i0 = first;
#if LOCKSTEP_HAS_SQUARE_TRANSPOSE
    for (; i0 + N <= nq; i0 += static_cast<int>(N)) RowSumsInLanes(s + i0 * ld, ld, n + i0, c0, c1, l_all + i0);
#endif
    for (; i0 + 8 <= nq; i0 += 8)
      ChainsOver<8>(n + i0, c0, c1, l_all + i0, [&](float acc, int i, int64_t j) { return e_of(acc, i0 + i, j); });
    for (; i0 + 4 <= nq; i0 += 4)
      ChainsOver<4>(n + i0, c0, c1, l_all + i0, [&](float acc, int i, int64_t j) { return e_of(acc, i0 + i, j); });
    for (; i0 + 2 <= nq; i0 += 2)
      ChainsOver<2>(n + i0, c0, c1, l_all + i0, [&](float acc, int i, int64_t j) { return e_of(acc, i0 + i, j); });
    for (; i0 < nq; ++i0)
      ChainsOver<1>(n + i0, c0, c1, l_all + i0, [&](float acc, int i, int64_t j) { return e_of(acc, i0 + i, j); });
    for (int g0 = 0; g0 < nq; g0 += kGroupQueries) {
      const int count = std::min(kGroupQueries, nq - g0);
      if (n[g0 + count - 1] <= c0) continue;
      const float* si = s + g0 * ld;
      float* oi = out + g0 * out_stride;
      ForCount<kGroupQueries>(count, [&](auto qb) {
        SpanValues<decltype(qb)::value>(si, ld, 1, n + g0, c0, c1, v, ldv, v_block_stride, head_dim, oi,
                                        out_stride);
      });
    }
  }
  DivideRows(out, out_stride, l_all, nq, head_dim);
}

int64_t QueriesScratch(int nq, int64_t n_max, int32_t) {
  if (nq <= 3) return nq * n_max;
  return nq * ScoreRow(n_max);
}
#endif

// Queries that AttentionMulti takes at once: 3 within AVX2's 16 registers; 6 with AVX-512's 32
// (ScoresMulti's and WeightedRows' tiles of 6 queries by 4 vectors: 24 accumulators).
constexpr int kSharedQueries = HWY_MAX_BYTES >= 64 ? 6 : 3;

// Attention for 1 <= nq <= kSharedQueries queries, each key vector's and value row's loads shared
// among them (AttentionMulti), or the single query's kernel.
void AttentionShared(const float* q, int64_t q_stride, const int64_t* n, int nq, const float* kt,
                     int64_t block_stride, const float* v, int64_t ldv, int64_t v_block_stride, int32_t head_dim,
                     float scale, float* out, int64_t out_stride, float* scratch) {
  if (nq == 1)
    return Attention(q, kt, block_stride, v, ldv, v_block_stride, n[0], head_dim, scale, out, scratch);
  ForCount<kSharedQueries>(nq, [&](auto qb) {
    AttentionMulti<decltype(qb)::value>(q, q_stride, n, kt, block_stride, v, ldv, v_block_stride, head_dim, scale,
                                        out, out_stride, scratch);
  });
}

// Kernels::attention_queries: tiles of up to kMaxTileQueries queries, each to the kernel that
// suits its size.
void AttentionQueries(const float* q, int64_t q_stride, const int64_t* n, int nq, const float* kt,
                      int64_t block_stride, const float* v, int64_t ldv, int64_t v_block_stride, int32_t head_dim,
                      float scale, float* out, int64_t out_stride, float* scratch) {
  if (nq > kMaxTileQueries) {  // tiles of kMaxTileQueries (n ascending, so each tile's too)
    for (int i0 = 0; i0 < nq; i0 += kMaxTileQueries)
      AttentionQueries(q + i0 * q_stride, q_stride, n + i0, std::min(kMaxTileQueries, nq - i0), kt, block_stride, v,
                       ldv, v_block_stride, head_dim, scale, out + i0 * out_stride, out_stride, scratch);
    return;
  }
#if HWY_TARGET <= HWY_AVX3
  // Up to 8 queries (a decode step's group of query heads, the last positions of a prefill row):
  // the lanes tile would leave half or more of its 16 lanes idle (its scores cost a whole vector
  // of queries), so they go to AttentionMulti, 6 at most at a time, 7 and 8 as 4 and the rest.
  // A decode step's attention for 8 key/value heads of 64 at 4096 positions on Zen 5: groups of
  // 4 (Llama 3.2 1B's) 2.0-2.3x, groups of 8 1.07-1.22x (five runs; bench/README.md,
  // "Grouped-query decode").
  if (nq > 3 && nq <= 8) {
    const int first = nq <= kSharedQueries ? nq : 4;
    AttentionShared(q, q_stride, n, first, kt, block_stride, v, ldv, v_block_stride, head_dim, scale, out,
                    out_stride, scratch);
    if (nq > first)
      AttentionShared(q + first * q_stride, q_stride, n + first, nq - first, kt, block_stride, v, ldv,
                      v_block_stride, head_dim, scale, out + first * out_stride, out_stride, scratch);
    return;
  }
#endif
  if (nq > 3)
    return AttentionTile(q, q_stride, n, nq, kt, block_stride, v, ldv, v_block_stride, head_dim, scale, out,
                         out_stride, scratch);
  AttentionShared(q, q_stride, n, nq, kt, block_stride, v, ldv, v_block_stride, head_dim, scale, out, out_stride,
                  scratch);
}

void FillAttention(Kernels& k) {
  k.attention = &Attention;
  k.attention_queries = &AttentionQueries;
  k.attention_queries_scratch = &QueriesScratch;
}

#else

// The portable fallback: ref::attention's loops over the blocked key layout.
void Attention(const float* q, const float* kt, int64_t block_stride, const float* v, int64_t ldv,
               int64_t v_block_stride, int64_t n, int32_t head_dim, float scale, float* out, float* scores) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    const float* column = kt + key_column(j, block_stride);
    float dot = 0.0f;
    for (int32_t dd = 0; dd < head_dim; ++dd) dot = ref::fma_f32(q[dd], column[dd * kKeysPerBlock], dot);
    scores[j] = dot * scale;
    m = ref::max_skip_nan(m, scores[j]);
  }
  for (int32_t dd = 0; dd < head_dim; ++dd) out[dd] = 0.0f;
  float l = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float e = ref::exp_f32(scores[j] - m);
    l = l + e;
    const float* row = v + value_row(j, ldv, v_block_stride);
    for (int32_t dd = 0; dd < head_dim; ++dd) out[dd] = ref::fma_f32(e, row[dd], out[dd]);
  }
  for (int32_t dd = 0; dd < head_dim; ++dd) out[dd] = out[dd] / l;
}

void AttentionQueries(const float* q, int64_t q_stride, const int64_t* n, int nq, const float* kt,
                      int64_t block_stride, const float* v, int64_t ldv, int64_t v_block_stride, int32_t head_dim,
                      float scale, float* out, int64_t out_stride, float* scratch) {
  for (int i = 0; i < nq; ++i)
    Attention(q + i * q_stride, kt, block_stride, v, ldv, v_block_stride, n[i], head_dim, scale,
              out + i * out_stride, scratch);
}

int64_t QueriesScratch(int nq, int64_t n_max, int32_t) { return nq * n_max; }

void FillAttention(Kernels& k) {
  k.attention = &Attention;
  k.attention_queries = &AttentionQueries;
  k.attention_queries_scratch = &QueriesScratch;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
