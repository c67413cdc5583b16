// Causal attention over whole sequences, for training: the forward (ref::attention at every
// position) and the backward (ref::attention_backward), with the queries of a block in lanes.
// A block is kBlockVectors * N consecutive queries of one head (24 on AVX2). Its scores (and,
// backward, dp, p and ds) are computed with query t in a lane and key j along a loop, so each
// query's chains over j (the max, the softmax sum l, D) are lanes of vectors run in increasing j
// rather than scalar chains, and the block's probabilities land in key-major rows (row j holds
// the queries t >= j), which the key gradients read contiguously. Each output is still one chain
// in the reference's order; lanes and threads split only independent outputs.
//
// Rows of k, v (and of each head's q and dout) that are not contiguous are first packed
// [T][head_dim]: rows a few KiB apart (dout in training, the fused qkv layout) would put a
// chunk's rows into a few L1 sets. Training keeps q, k and v contiguous per head group.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/attention_sequence.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <limits>
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

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Vectors of queries per block: a score tile of 4 keys x 3 vectors keeps 12 accumulators.
constexpr size_t kBlockVectors = 3;
// Where there are 32 vector registers (AVX-512, SVE), tiles twice as large: score tiles of 8 keys
// (24 accumulators), key-gradient tiles of 6 keys, weighted sums of 6 queries. At head_dim 32
// on AVX-512 (s256: two vectors) the smaller tiles kept 3 to 6 chains, fewer than the 8 that
// cover the FMA latency on two pipes.
constexpr bool kWideTiles = HWY_MAX_BYTES >= 64;
constexpr int kScoreKeys = kWideTiles ? 8 : 4;
constexpr int kGradKeys = kWideTiles ? 6 : 3;
constexpr int kSumQueries = kWideTiles ? 6 : 3;
// Rows of k (dq) or of q and dout (dk, dv) a pass takes at a time: 128 rows of head_dim 32 are
// 16 KiB, which stay in L1 while the tiles pass over them again and again; a whole sequence's
// rows would stream from L2 for every tile.
constexpr int64_t kChunk = 128;

int64_t BlockQueries() { return static_cast<int64_t>(kBlockVectors) * static_cast<int64_t>(hn::Lanes(DF())); }

int64_t ScratchRow(int64_t T) {
  const int64_t b = BlockQueries();
  return (T + b - 1) / b * b + static_cast<int64_t>(hn::Lanes(DF()));
}

// Backward: pt and st [T][ScratchRow(T)] (one head's p, and dp then ds, at [j][t]); k, v and
// the head's q and dout packed [T][head_dim]; the block's queries and output gradients
// transposed, [head_dim][block] each.
int64_t BackwardScratch(int64_t T, int32_t, int32_t head_dim) {
  return 2 * T * ScratchRow(T) + 4 * T * head_dim + 2 * static_cast<int64_t>(head_dim) * BlockQueries();
}

// Forward: one block's e [T][block] and l [block]; k, v and the head's q packed [T][head_dim];
// the block's queries transposed [head_dim][block].
int64_t ForwardScratch(int64_t T, int32_t head_dim) {
  return (T + 1) * BlockQueries() + 3 * T * head_dim + static_cast<int64_t>(head_dim) * BlockQueries();
}

// out[(j0 + i) * ld + lane of vector u] for keys j0 .. j0 + KB - 1 and U vectors of the block's
// queries: (chain over d of rows_j[d] * xt[d][query]) times *mul when mul is given. Scores: xt
// the block's queries, rows the keys, mul the scale; dp: xt the output gradients, rows the
// values, no multiply (the reference stores the chain itself).
template <int KB, int U>
HWY_INLINE void KeyTile(const float* HWY_RESTRICT xt, int64_t B, const float* HWY_RESTRICT rows, int64_t stride,
                        int64_t j0, int32_t head_dim, const float* mul, float* HWY_RESTRICT out, int64_t ld) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // Accumulator I: key I / U, vector of queries I % U (tile-inl.hpp).
  WithTile<KB * U>([&](auto) LOCKSTEP_LAMBDA_INLINE { return hn::Zero(d); }, [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    for (int32_t e = 0; e < head_dim; ++e) {
      // Each vector of queries and each key's value is loaded once (the repeats fold away).
      const auto fma = [&](VF& a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
        const VF r = hn::Set(d, rows[(j0 + static_cast<int64_t>(I_ / U)) * stride + e]);
        a_iu = hn::MulAdd(r, hn::LoadU(d, xt + e * B + static_cast<int64_t>(I_ % U) * N), a_iu);
      };
      (fma(acc, I), ...);
    }
    const auto store = [&](VF a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
      float* at = out + (j0 + static_cast<int64_t>(I_ / U)) * ld + static_cast<int64_t>(I_ % U) * N;
      hn::StoreU(mul ? hn::Mul(a_iu, hn::Set(d, *mul)) : a_iu, d, at);
    };
    (store(acc, I), ...);
  });
}

// KeyTile<KB> over `vectors` vectors (1 to kBlockVectors).
template <int KB>
HWY_INLINE void KeyTileOf(int64_t vectors, const float* xt, int64_t B, const float* rows, int64_t stride, int64_t j0,
                          int32_t head_dim, const float* mul, float* out, int64_t ld) {
  static_assert(kBlockVectors == 3);
  switch (vectors) {
    case 3: return KeyTile<KB, 3>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
    case 2: return KeyTile<KB, 2>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
    default: return KeyTile<KB, 1>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
  }
}

// KeyTile over keys [0, n) for the block of queries [t0, n): each tile of keys over only the
// vectors holding a query that reaches one of its keys (t >= j, t < n); the others' lanes are
// left as they are, and nothing reads them.
void KeyTiles(const float* xt, int64_t B, const float* rows, int64_t stride, int64_t t0, int64_t n, int32_t head_dim,
              const float* mul, float* out, int64_t ld) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  const int64_t end = (n - t0 + N - 1) / N;  // vectors holding queries
  auto first = [&](int64_t j0) { return j0 <= t0 ? 0 : (j0 - t0) / N; };  // first vector reaching key j0
  int64_t j0 = 0;
  for (; j0 + kScoreKeys <= n; j0 += kScoreKeys) {
    const int64_t u0 = first(j0);
    KeyTileOf<kScoreKeys>(end - u0, xt + u0 * N, B, rows, stride, j0, head_dim, mul, out + u0 * N, ld);
  }
  for (; j0 + 4 <= n; j0 += 4) {
    const int64_t u0 = first(j0);
    KeyTileOf<4>(end - u0, xt + u0 * N, B, rows, stride, j0, head_dim, mul, out + u0 * N, ld);
  }
  const int64_t u0 = first(j0);
  switch (n - j0) {
    case 3: return KeyTileOf<3>(end - u0, xt + u0 * N, B, rows, stride, j0, head_dim, mul, out + u0 * N, ld);
    case 2: return KeyTileOf<2>(end - u0, xt + u0 * N, B, rows, stride, j0, head_dim, mul, out + u0 * N, ld);
    case 1: return KeyTileOf<1>(end - u0, xt + u0 * N, B, rows, stride, j0, head_dim, mul, out + u0 * N, ld);
    default: return;
  }
}

// step(j, u, keep) for keys j in [0, n) in increasing order and each vector u of the block at
// t0 (queries [t0, n)) that holds a query reaching key j; keep(next, current) is `next` in the
// lanes whose query reaches key j (t >= j) and `current` in the others. Keys up to t0 reach
// every lane. Lanes no query reaches (t < j, or t >= n) are left as they are. u is a
// std::integral_constant<size_t, u>, so that the steps can name each vector's state at compile
// time (tile-inl.hpp: no arrays of vectors).
template <class Step>
HWY_INLINE void ForKeys(int64_t t0, int64_t n, const Step& step) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vectors = (n - t0 + N - 1) / N;
  const int64_t all = std::min(n, t0 + 1);
  const auto every = [](VF next, VF) { return next; };
  // f(u) for u in [u_begin, vectors), in increasing u.
  const auto for_vectors = [&](int64_t u_begin, const auto& f) LOCKSTEP_LAMBDA_INLINE {
    [&]<size_t... U>(std::index_sequence<U...>) LOCKSTEP_LAMBDA_INLINE {
      ((static_cast<int64_t>(U) >= u_begin && static_cast<int64_t>(U) < vectors
            ? f(std::integral_constant<size_t, U>())
            : void()),
       ...);
    }(std::make_index_sequence<kBlockVectors>());
  };
  for (int64_t j = 0; j < all; ++j) for_vectors(0, [&](auto u) LOCKSTEP_LAMBDA_INLINE { step(j, u, every); });
  for (int64_t j = all; j < n; ++j)
    for_vectors((j - t0) / N, [&](auto u) LOCKSTEP_LAMBDA_INLINE {
      const auto reach = hn::Ge(hn::Iota(d, static_cast<float>(t0 + static_cast<int64_t>(u) * N)),
                                hn::Set(d, static_cast<float>(j)));
      // By reference: a closure cannot hold a sizeless SVE vector.
      step(j, u, [&reach](VF next, VF current) LOCKSTEP_LAMBDA_INLINE { return hn::IfThenElse(reach, next, current); });
    });
}

// The forward's softmax over the block's columns of keys [0, n), in place: scores in, e out;
// l of each query into l_out. Per query, as the reference: m = max of s, e = exp(s - m), l =
// chain of e.
void BlockExp(float* e, int64_t ld, int64_t t0, int64_t n, float* l_out) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  // State I < kBlockVectors: m of vector I; then l of vector I - kBlockVectors (tile-inl.hpp).
  WithTile<2 * kBlockVectors>(
      [&](auto I) LOCKSTEP_LAMBDA_INLINE { return decltype(I)::value < kBlockVectors ? hn::Set(d, -std::numeric_limits<float>::infinity()) : hn::Zero(d); },
      [&]<size_t... I>(std::index_sequence<I...>, auto... ml) LOCKSTEP_LAMBDA_INLINE {
        ForKeys(t0, n, [&](int64_t j, auto u, auto keep) LOCKSTEP_LAMBDA_INLINE {
          VF& m = Nth<decltype(u)::value>(ml...);
          m = keep(MaxSkipNaN(m, hn::LoadU(d, e + j * ld + static_cast<int64_t>(u) * N)), m);
        });
        ForKeys(t0, n, [&](int64_t j, auto u, auto keep) LOCKSTEP_LAMBDA_INLINE {
          VF& m = Nth<decltype(u)::value>(ml...);
          VF& l = Nth<kBlockVectors + decltype(u)::value>(ml...);
          float* at = e + j * ld + static_cast<int64_t>(u) * N;
          const VF x = ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, at), m));
          hn::StoreU(x, d, at);
          l = keep(hn::Add(l, x), l);
        });
        const auto store = [&](VF l, size_t u) LOCKSTEP_LAMBDA_INLINE { hn::StoreU(l, d, l_out + static_cast<int64_t>(u) * N); };
        ((I >= kBlockVectors ? store(ml, I - kBlockVectors) : void()), ...);
      });
}

// The block's softmax and ds, in place over its columns of keys [0, n): pt holds the scores,
// st dp. Per query, as the reference: BlockExp's e and l, then p = e / l, D = fma chain of
// p dp, ds = (p (dp - D)) scale.
void BlockSoftmax(float* pt, float* st, int64_t ld, int64_t t0, int64_t n, float scale) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  HWY_ALIGN float l_lanes[kBlockVectors * HWY_MAX_BYTES / sizeof(float)];
  BlockExp(pt, ld, t0, n, l_lanes);
  // State I < kBlockVectors: l of vector I; then D of vector I - kBlockVectors (tile-inl.hpp).
  WithTile<2 * kBlockVectors>(
      [&](auto I) LOCKSTEP_LAMBDA_INLINE {
        constexpr size_t i = decltype(I)::value;
        return i < kBlockVectors ? hn::Load(d, l_lanes + static_cast<int64_t>(i) * N) : hn::Zero(d);
      },
      [&]<size_t... I>(std::index_sequence<I...>, auto... lD) LOCKSTEP_LAMBDA_INLINE {
        ForKeys(t0, n, [&](int64_t j, auto u, auto keep) LOCKSTEP_LAMBDA_INLINE {
          const VF& l = Nth<decltype(u)::value>(lD...);
          VF& D = Nth<kBlockVectors + decltype(u)::value>(lD...);
          float* at = pt + j * ld + static_cast<int64_t>(u) * N;
          const VF p = hn::Div(hn::LoadU(d, at), l);
          hn::StoreU(p, d, at);
          D = keep(hn::MulAdd(p, hn::LoadU(d, st + j * ld + static_cast<int64_t>(u) * N), D), D);
        });
        const VF scale_v = hn::Set(d, scale);
        ForKeys(t0, n, [&](int64_t j, auto u, auto) LOCKSTEP_LAMBDA_INLINE {
          const VF& D = Nth<kBlockVectors + decltype(u)::value>(lD...);
          float* at = st + j * ld + static_cast<int64_t>(u) * N;
          const VF p = hn::LoadU(d, pt + j * ld + static_cast<int64_t>(u) * N);
          hn::StoreU(hn::Mul(hn::Mul(p, hn::Sub(hn::LoadU(d, at), D)), scale_v), d, at);
        });
      });
}

// For the block's queries t in [t0, n): out_t[d] = chain over keys j <= t of w[t][j] * k_j[d]
// (st: the block's column of query t0, w of key j and query t at st[j * ld + t - t0]): the
// backward's dq (w = ds), and the forward's weighted sums of values before the division by l
// (w = e, k = v). In chunks of kChunk keys, so that the chunk's rows of k stay in L1 while every
// query of the block passes over them, the keys each group of kSumQueries queries reaches
// together; then each one's own last keys after them.
void BlockWeightedRows(const float* st, int64_t ld, const float* k, int64_t k_stride, int64_t t0, int64_t n,
                       int32_t head_dim, float* out, int64_t out_stride) {
  constexpr int G = kSumQueries;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t c1 = std::min(n, c0 + kChunk);
    int64_t t = t0;
    for (; t + G <= n; t += G)
      if (c0 <= t)
        WeightedRows<G>(st + (t - t0), 1, ld, k, k_stride, kKeysPerBlock * k_stride, c0, std::min(c1, t + 1),
                        head_dim, c0 == 0, out + t * out_stride, out_stride);
    for (; t < n; ++t)
      if (c0 <= t)
        WeightedRows<1>(st + (t - t0), 1, ld, k, k_stride, kKeysPerBlock * k_stride, c0, std::min(c1, t + 1),
                        head_dim, c0 == 0, out + t * out_stride, out_stride);
  }
  for (int64_t t = t0; t + G <= n; t += G)
    for (int64_t i = 1; i < G; ++i)
      WeightedRows<1>(st + (t + i - t0), 1, ld, k, k_stride, kKeysPerBlock * k_stride, t + 1, t + i + 1, head_dim,
                      false, out + (t + i) * out_stride, out_stride);
}

// out_j[d0 .. d0 + U N) for keys j0 .. j0 + KB - 1 continue their chains over queries t in
// [tb, te), t >= j, of w[j][t] * y_t[d] (w: one head's pt or st; y: its dout or q rows); they
// start from zero when `first`, else from out (exact round trips).
template <int KB, int U>
HWY_INLINE void KeyGradTile(const float* HWY_RESTRICT w, int64_t ld, const float* HWY_RESTRICT y, int64_t y_stride,
                            int64_t j0, int64_t tb, int64_t te, int32_t d0, bool first, float* HWY_RESTRICT out,
                            int64_t out_stride) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float* wj = w + j0 * ld;
  const auto at = [&](size_t I) LOCKSTEP_LAMBDA_INLINE {
    return (j0 + static_cast<int64_t>(I / U)) * out_stride + d0 + static_cast<int64_t>(I % U) * N;
  };
  // Accumulator I: key j0 + I / U, vector I % U (tile-inl.hpp).
  WithTile<KB * U>([&](auto I) LOCKSTEP_LAMBDA_INLINE { return first ? hn::Zero(d) : hn::LoadU(d, out + at(decltype(I)::value)); },
                   [&]<size_t... I>(std::index_sequence<I...>, auto... acc) LOCKSTEP_LAMBDA_INLINE {
    // Each vector of y and each weight is loaded once (the repeats fold away).
    const auto fma = [&](VF& a_iu, size_t I_, int64_t t) LOCKSTEP_LAMBDA_INLINE {
      const VF wv = hn::Set(d, wj[static_cast<int64_t>(I_ / U) * ld + t]);
      a_iu = hn::MulAdd(wv, hn::LoadU(d, y + t * y_stride + d0 + static_cast<int64_t>(I_ % U) * N), a_iu);
    };
    // Queries before the tile's last key reach only the keys at or below them.
    const int64_t full = std::max(tb, j0 + KB - 1);
    for (int64_t t = std::max(tb, j0); t < std::min(te, full); ++t) {
      const auto reaching = [&](VF& a_iu, size_t I_) LOCKSTEP_LAMBDA_INLINE {
        if (j0 + static_cast<int64_t>(I_ / U) <= t) fma(a_iu, I_, t);
      };
      (reaching(acc, I), ...);
    }
    for (int64_t t = full; t < te; ++t) (fma(acc, I, t), ...);
    (hn::StoreU(acc, d, out + at(I)), ...);
  });
}

// KeyGradTile over every d.
template <int KB>
void KeyGradTiles(const float* w, int64_t ld, const float* y, int64_t y_stride, int32_t head_dim, int64_t j0,
                  int64_t tb, int64_t te, bool first, float* out, int64_t out_stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N))
    KeyGradTile<KB, 4>(w, ld, y, y_stride, j0, tb, te, d0, first, out, out_stride);
  for (; d0 + 2 * N <= head_dim; d0 += static_cast<int32_t>(2 * N))
    KeyGradTile<KB, 2>(w, ld, y, y_stride, j0, tb, te, d0, first, out, out_stride);
  for (; d0 + N <= head_dim; d0 += static_cast<int32_t>(N))
    KeyGradTile<KB, 1>(w, ld, y, y_stride, j0, tb, te, d0, first, out, out_stride);
  for (; d0 < head_dim; ++d0)
    for (int64_t j = j0; j < j0 + KB; ++j) {
      float acc = first ? 0.0f : out[j * out_stride + d0];
      for (int64_t t = std::max(tb, j); t < te; ++t) acc = ref::fma_f32(w[j * ld + t], y[t * y_stride + d0], acc);
      out[j * out_stride + d0] = acc;
    }
}

// Every key's gradient continued over one head's queries t >= j (starting from zero for the
// group's first head): the queries in chunks of kChunk, so that the chunk's rows of y stay in L1
// across the keys.
void KeyGrads(const float* w, int64_t ld, int64_t T, const float* y, int32_t head_dim, bool first_head, float* out,
              int64_t out_stride) {
  for (int64_t c0 = 0; c0 < T; c0 += kChunk) {
    const int64_t c1 = std::min(T, c0 + kChunk);
    // Keys below the chunk continue their chains; the chunk's own keys start theirs.
    auto keys = [&](int64_t jb, int64_t je, bool first) {
      int64_t j0 = jb;
      for (; j0 + kGradKeys <= je; j0 += kGradKeys)
        KeyGradTiles<kGradKeys>(w, ld, y, head_dim, head_dim, j0, c0, c1, first, out, out_stride);
      for (; j0 + 3 <= je; j0 += 3) KeyGradTiles<3>(w, ld, y, head_dim, head_dim, j0, c0, c1, first, out, out_stride);
      for (; j0 < je; ++j0) KeyGradTiles<1>(w, ld, y, head_dim, head_dim, j0, c0, c1, first, out, out_stride);
    };
    keys(0, c0, false);
    keys(c0, c1, first_head);
  }
}

// The rows of x (row stride x_stride) as [T][head_dim]: x itself when they are contiguous, else
// packed into dst. Strided rows lie kilobytes apart in training's batch (from L3), so each is
// asked for kPrefetchRows rows ahead.
constexpr int64_t kPrefetchRows = 32;
const float* Rows(const float* x, int64_t x_stride, int64_t T, int32_t head_dim, float* dst) {
  if (x_stride == head_dim) return x;
  const DF d;
  const int32_t N = static_cast<int32_t>(hn::Lanes(d));
  for (int64_t t = 0; t < T; ++t) {
    const float* src = x + t * x_stride;
    float* out = dst + t * head_dim;
    if (t + kPrefetchRows < T) {
      const float* ahead = src + kPrefetchRows * x_stride;
      for (int32_t e = 0; e < head_dim; e += 16) hwy::Prefetch(ahead + e);  // 16 floats: a 64-byte line
      hwy::Prefetch(ahead + head_dim - 1);
    }
    int32_t e = 0;
    for (; e + N <= head_dim; e += N) hn::StoreU(hn::LoadU(d, src + e), d, out + e);
    for (; e < head_dim; ++e) out[e] = src[e];
  }
  return dst;
}

// xt[e][i] = x_{t0+i}[e] for the block's `count` queries, zero past them. On x86, whole N x N
// squares (N queries by N dimensions) go by vector transposes; the rest one float at a time.
void PackBlock(const float* x, int64_t x_stride, int64_t count, int32_t head_dim, int64_t B, float* xt) {
  int64_t whole_i = 0, whole_e = 0;  // [0, whole_i) x [0, whole_e) done by squares
#if LOCKSTEP_HAS_SQUARE_TRANSPOSE
  const DF d;
  using V = hn::Vec<DF>;
  constexpr int N = static_cast<int>(hn::MaxLanes(DF()));
  whole_i = count / N * N;
  whole_e = head_dim / N * N;
  for (int64_t i0 = 0; i0 < whole_i; i0 += N)
    for (int64_t e0 = 0; e0 < whole_e; e0 += N) {
      decltype(V().raw) r[N], c[N];  // N queries' dimensions [e0, e0 + N), then N dimensions' queries
      for (int i = 0; i < N; ++i) r[i] = hn::LoadU(d, x + (i0 + i) * x_stride + e0).raw;
      TransposeSquare(r, c);
      for (int e = 0; e < N; ++e) hn::StoreU(V{c[e]}, d, xt + (e0 + e) * B + i0);
    }
#endif
  for (int32_t e = 0; e < head_dim; ++e) {
    float* row = xt + static_cast<int64_t>(e) * B;
    for (int64_t i = e < whole_e ? whole_i : 0; i < count; ++i) row[i] = x[i * x_stride + e];
    std::fill(row + count, row + B, 0.0f);
  }
}

void AttentionSequence(const float* HWY_RESTRICT q, int64_t q_stride, const float* HWY_RESTRICT k,
                       const float* HWY_RESTRICT v, int64_t kv_stride, int64_t T, int32_t group, int32_t head_dim,
                       float scale, float* HWY_RESTRICT out, int64_t out_stride, float* HWY_RESTRICT scratch) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t B = BlockQueries(), rows = T * head_dim;
  float* e = scratch;
  float* l = e + T * B;
  float* kp = l + B;
  float* vp = kp + rows;
  float* qp = vp + rows;
  float* qt = qp + rows;
  const float* kr = Rows(k, kv_stride, T, head_dim, kp);
  const float* vr = Rows(v, kv_stride, T, head_dim, vp);
  for (int32_t h = 0; h < group; ++h) {
    const int64_t off = static_cast<int64_t>(h) * head_dim;
    const float* qr = Rows(q + off, q_stride, T, head_dim, qp);
    for (int64_t t0 = 0; t0 < T; t0 += B) {
      const int64_t count = std::min(B, T - t0), n = t0 + count;
      PackBlock(qr + t0 * head_dim, head_dim, count, head_dim, B, qt);
      KeyTiles(qt, B, kr, head_dim, t0, n, head_dim, &scale, e, B);
      BlockExp(e, B, t0, n, l);
      BlockWeightedRows(e, B, vr, head_dim, t0, n, head_dim, out + off, out_stride);
      for (int64_t i = 0; i < count; ++i) {
        float* o = out + (t0 + i) * out_stride + off;
        const VF l_v = hn::Set(d, l[i]);
        int32_t dd = 0;
        for (; dd + N <= head_dim; dd += static_cast<int32_t>(N)) hn::StoreU(hn::Div(hn::LoadU(d, o + dd), l_v), d, o + dd);
        for (; dd < head_dim; ++dd) o[dd] = o[dd] / l[i];
      }
    }
  }
}

void AttentionBackward(const float* HWY_RESTRICT q, int64_t q_stride, const float* HWY_RESTRICT k,
                       const float* HWY_RESTRICT v, int64_t kv_stride, const float* HWY_RESTRICT dout,
                       int64_t dout_stride, float* HWY_RESTRICT dq, int64_t dq_stride, float* HWY_RESTRICT dk,
                       float* HWY_RESTRICT dv, int64_t dkv_stride, int64_t T, int32_t group, int32_t head_dim, float scale,
                       float* HWY_RESTRICT scratch) {
  const int64_t B = BlockQueries(), ld = ScratchRow(T), rows = T * head_dim;
  float* pt = scratch;
  float* st = pt + T * ld;
  float* kp = st + T * ld;
  float* vp = kp + rows;
  float* qp = vp + rows;
  float* op = qp + rows;
  float* qt = op + rows;
  float* ot = qt + static_cast<int64_t>(head_dim) * B;
  const float* kr = Rows(k, kv_stride, T, head_dim, kp);
  const float* vr = Rows(v, kv_stride, T, head_dim, vp);
  // Head by head: dk and dv chains run over the heads, then the queries.
  for (int32_t h = 0; h < group; ++h) {
    const int64_t off = static_cast<int64_t>(h) * head_dim;
    const float* qr = Rows(q + off, q_stride, T, head_dim, qp);
    const float* orows = Rows(dout + off, dout_stride, T, head_dim, op);
    for (int64_t t0 = 0; t0 < T; t0 += B) {
      const int64_t count = std::min(B, T - t0), n = t0 + count;
      PackBlock(qr + t0 * head_dim, head_dim, count, head_dim, B, qt);
      PackBlock(orows + t0 * head_dim, head_dim, count, head_dim, B, ot);
      KeyTiles(qt, B, kr, head_dim, t0, n, head_dim, &scale, pt + t0, ld);
      KeyTiles(ot, B, vr, head_dim, t0, n, head_dim, nullptr, st + t0, ld);
      BlockSoftmax(pt + t0, st + t0, ld, t0, n, scale);
      BlockWeightedRows(st + t0, ld, kr, head_dim, t0, n, head_dim, dq + off, dq_stride);
    }
    KeyGrads(st, ld, T, qr, head_dim, h == 0, dk, dkv_stride);
    KeyGrads(pt, ld, T, orows, head_dim, h == 0, dv, dkv_stride);
  }
}

#else

// The portable fallback: the reference itself.
int64_t BackwardScratch(int64_t T, int32_t group, int32_t) { return 2 * group * T * T; }
int64_t ForwardScratch(int64_t T, int32_t) { return T; }

void AttentionSequence(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride, int64_t T,
                       int32_t group, int32_t head_dim, float scale, float* out, int64_t out_stride, float* scratch) {
  for (int32_t h = 0; h < group; ++h)
    for (int64_t t = 0; t < T; ++t)
      ref::attention<float>(q + t * q_stride + static_cast<int64_t>(h) * head_dim, k, v, kv_stride, t + 1, head_dim,
                            scale, out + t * out_stride + static_cast<int64_t>(h) * head_dim, scratch);
}

void AttentionBackward(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride,
                       const float* dout, int64_t dout_stride, float* dq, int64_t dq_stride, float* dk, float* dv,
                       int64_t dkv_stride, int64_t T, int32_t group, int32_t head_dim, float scale, float* scratch) {
  ref::attention_backward<float>(q, q_stride, k, v, kv_stride, dout, dout_stride, dq, dq_stride, dk, dv, dkv_stride, T, group,
                                 head_dim, scale, scratch);
}

#endif

void FillAttentionSequence(Kernels& k) {
  k.attention_sequence = &AttentionSequence;
  k.attention_sequence_scratch = &ForwardScratch;
  k.attention_backward = &AttentionBackward;
  k.attention_backward_scratch = &BackwardScratch;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
