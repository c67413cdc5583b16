// Causal attention backward (ref::attention_backward) with the queries of a block in lanes.
// A block is kBlockVectors * N consecutive queries of one head (24 on AVX2). Its scores, dp, p
// and ds are computed with query t in a lane and key j along a loop, so each query's chains over
// j (the max, the softmax sum l, D) are lanes of vectors run in increasing j rather than scalar
// chains, and P and dS land in key-major rows (row j holds the queries t >= j) that the key
// gradients then read contiguously. Each output is still one chain in the reference's order;
// lanes and threads split only independent outputs.
//
// Head by head, each head's dk and dv chains continuing the previous head's. scratch: pt and st
// [T][ld] (one head's p, and dp then ds, of query t and key j at [j][t]; ld is T rounded up to
// whole blocks plus one vector, so that rows do not all share L1 sets); the rows of k, v and the
// head's q and dout packed [T][head_dim]; the block's queries and output gradients transposed,
// [head_dim][block] each.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/attention_backward.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <limits>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/math-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Vectors of queries per block: a score tile of 4 keys x 3 vectors keeps 12 accumulators.
constexpr int kBlockVectors = 3;
// Rows of k (dq) or of q and dout (dk, dv) a pass takes at a time: 128 rows of head_dim 32 are
// 16 KiB, which stay in L1 while the tiles pass over them again and again; a whole sequence's
// rows would stream from L2 for every tile.
constexpr int64_t kChunk = 128;

int64_t BlockQueries() { return kBlockVectors * static_cast<int64_t>(hn::Lanes(DF())); }

int64_t ScratchRow(int64_t T) {
  const int64_t b = BlockQueries();
  return (T + b - 1) / b * b + static_cast<int64_t>(hn::Lanes(DF()));
}

int64_t ScratchFloats(int64_t T, int32_t, int32_t head_dim) {
  return 2 * T * ScratchRow(T) + 4 * T * head_dim + 2 * static_cast<int64_t>(head_dim) * BlockQueries();
}

// out[(j0 + i) * ld + lane of vector u] for keys j0 .. j0 + KB - 1 and the block's queries:
// (chain over d of rows_j[d] * xt[d][query]) times *mul when mul is given. Scores: xt the
// block's queries, rows the keys, mul the scale; dp: xt the output gradients, rows the values,
// no multiply (the reference stores the chain itself).
template <int KB>
HWY_INLINE void KeyTile(const float* HWY_RESTRICT xt, int64_t B, const float* HWY_RESTRICT rows, int64_t stride,
                        int64_t j0, int32_t head_dim, const float* mul, float* HWY_RESTRICT out, int64_t ld) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF acc[KB][kBlockVectors];
  for (int i = 0; i < KB; ++i)
    for (int u = 0; u < kBlockVectors; ++u) acc[i][u] = hn::Zero(d);
  for (int32_t e = 0; e < head_dim; ++e) {
    VF xv[kBlockVectors];
    for (int u = 0; u < kBlockVectors; ++u) xv[u] = hn::LoadU(d, xt + e * B + u * N);
    for (int i = 0; i < KB; ++i) {
      const VF r = hn::Set(d, rows[(j0 + i) * stride + e]);
      for (int u = 0; u < kBlockVectors; ++u) acc[i][u] = hn::MulAdd(r, xv[u], acc[i][u]);
    }
  }
  for (int i = 0; i < KB; ++i)
    for (int u = 0; u < kBlockVectors; ++u)
      hn::StoreU(mul ? hn::Mul(acc[i][u], hn::Set(d, *mul)) : acc[i][u], d, out + (j0 + i) * ld + u * N);
}

// KeyTile over keys [0, n).
void KeyTiles(const float* xt, int64_t B, const float* rows, int64_t stride, int64_t n, int32_t head_dim,
              const float* mul, float* out, int64_t ld) {
  int64_t j0 = 0;
  for (; j0 + 4 <= n; j0 += 4) KeyTile<4>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
  switch (n - j0) {
    case 3: return KeyTile<3>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
    case 2: return KeyTile<2>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
    case 1: return KeyTile<1>(xt, B, rows, stride, j0, head_dim, mul, out, ld);
    default: return;
  }
}

// step(j, u, keep) for keys j in [0, n) in increasing order and each vector u of the block at
// t0; keep(next, current) is `next` in the lanes whose query reaches key j (t >= j), and
// `current` in the others. Keys up to t0 reach every lane.
template <class Step>
HWY_INLINE void ForKeys(int64_t t0, int64_t n, const Step& step) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t all = std::min(n, t0 + 1);
  const auto every = [](VF next, VF) { return next; };
  for (int64_t j = 0; j < all; ++j)
    for (int u = 0; u < kBlockVectors; ++u) step(j, u, every);
  for (int64_t j = all; j < n; ++j)
    for (int u = 0; u < kBlockVectors; ++u) {
      const auto reach = hn::Ge(hn::Iota(d, static_cast<float>(t0 + u * N)), hn::Set(d, static_cast<float>(j)));
      step(j, u, [reach](VF next, VF current) { return hn::IfThenElse(reach, next, current); });
    }
}

// The block's softmax and ds, in place over its columns of keys [0, n): pt holds the scores,
// st dp. Per query, as the reference: m = max of s, e = exp(s - m), l = chain of e, p = e / l,
// D = fma chain of p dp, ds = (p (dp - D)) scale.
void BlockSoftmax(float* pt, float* st, int64_t ld, int64_t t0, int64_t n, float scale) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF m[kBlockVectors], l[kBlockVectors], D[kBlockVectors];
  for (int u = 0; u < kBlockVectors; ++u) {
    m[u] = hn::Set(d, -std::numeric_limits<float>::infinity());
    l[u] = hn::Zero(d);
    D[u] = hn::Zero(d);
  }
  ForKeys(t0, n, [&](int64_t j, int u, auto keep) {
    m[u] = keep(MaxSkipNaN(m[u], hn::LoadU(d, pt + j * ld + u * N)), m[u]);
  });
  ForKeys(t0, n, [&](int64_t j, int u, auto keep) {
    float* at = pt + j * ld + u * N;
    const VF e = Exp(d, hn::Sub(hn::LoadU(d, at), m[u]));
    hn::StoreU(e, d, at);
    l[u] = keep(hn::Add(l[u], e), l[u]);
  });
  ForKeys(t0, n, [&](int64_t j, int u, auto keep) {
    float* at = pt + j * ld + u * N;
    const VF p = hn::Div(hn::LoadU(d, at), l[u]);
    hn::StoreU(p, d, at);
    D[u] = keep(hn::MulAdd(p, hn::LoadU(d, st + j * ld + u * N), D[u]), D[u]);
  });
  const VF scale_v = hn::Set(d, scale);
  ForKeys(t0, n, [&](int64_t j, int u, auto) {
    float* at = st + j * ld + u * N;
    const VF p = hn::LoadU(d, pt + j * ld + u * N);
    hn::StoreU(hn::Mul(hn::Mul(p, hn::Sub(hn::LoadU(d, at), D[u])), scale_v), d, at);
  });
}

// dq_{t+i}[d0 .. d0 + U N) += chain over keys j in [j_begin, j_end) of ds[t+i][j] * k_j[d] for
// QB consecutive queries (ds at st[j * ld + i]); the keys' loads are shared, and the running sums
// live in dq (exact round trips).
template <int QB, int U>
HWY_INLINE void QueryTile(const float* HWY_RESTRICT st, int64_t ld, const float* HWY_RESTRICT k, int64_t k_stride,
                          int64_t j_begin, int64_t j_end, int32_t d0, bool first, float* HWY_RESTRICT dq,
                          int64_t dq_stride) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  VF acc[QB][U];
  for (int i = 0; i < QB; ++i)
    for (int u = 0; u < U; ++u) acc[i][u] = first ? hn::Zero(d) : hn::LoadU(d, dq + i * dq_stride + d0 + u * N);
  for (int64_t j = j_begin; j < j_end; ++j) {
    VF kv[U];
    for (int u = 0; u < U; ++u) kv[u] = hn::LoadU(d, k + j * k_stride + d0 + u * N);
    for (int i = 0; i < QB; ++i) {
      const VF ds = hn::Set(d, st[j * ld + i]);
      for (int u = 0; u < U; ++u) acc[i][u] = hn::MulAdd(ds, kv[u], acc[i][u]);
    }
  }
  for (int i = 0; i < QB; ++i)
    for (int u = 0; u < U; ++u) hn::StoreU(acc[i][u], d, dq + i * dq_stride + d0 + u * N);
}

// QueryTile over every d.
template <int QB>
void QueryTiles(const float* st, int64_t ld, const float* k, int64_t k_stride, int64_t j_begin, int64_t j_end,
                int32_t head_dim, bool first, float* dq, int64_t dq_stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N))
    QueryTile<QB, 4>(st, ld, k, k_stride, j_begin, j_end, d0, first, dq, dq_stride);
  for (; d0 + N <= head_dim; d0 += static_cast<int32_t>(N))
    QueryTile<QB, 1>(st, ld, k, k_stride, j_begin, j_end, d0, first, dq, dq_stride);
  for (; d0 < head_dim; ++d0)
    for (int i = 0; i < QB; ++i) {
      float acc = first ? 0.0f : dq[i * dq_stride + d0];
      for (int64_t j = j_begin; j < j_end; ++j) acc = ref::fma_f32(st[j * ld + i], k[j * k_stride + d0], acc);
      dq[i * dq_stride + d0] = acc;
    }
}

// dq of the block's queries [t0, n) (st points at column 0): in chunks of kChunk keys, so that
// the chunk's rows of k stay in L1 while every query of the block passes over them, the keys
// each triple of queries reaches together; then each one's own last keys after them.
void QueryGrads(const float* st, int64_t ld, const float* k, int64_t k_stride, int64_t t0, int64_t n,
                int32_t head_dim, float* dq, int64_t dq_stride) {
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t c1 = std::min(n, c0 + kChunk);
    int64_t t = t0;
    for (; t + 3 <= n; t += 3)
      if (c0 <= t)
        QueryTiles<3>(st + t, ld, k, k_stride, c0, std::min(c1, t + 1), head_dim, c0 == 0, dq + t * dq_stride, dq_stride);
    for (; t < n; ++t)
      if (c0 <= t)
        QueryTiles<1>(st + t, ld, k, k_stride, c0, std::min(c1, t + 1), head_dim, c0 == 0, dq + t * dq_stride, dq_stride);
  }
  for (int64_t t = t0; t + 3 <= n; t += 3)
    for (int64_t i = 1; i < 3; ++i)
      QueryTiles<1>(st + t + i, ld, k, k_stride, t + 1, t + i + 1, head_dim, false, dq + (t + i) * dq_stride, dq_stride);
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
  VF acc[KB][U];
  for (int i = 0; i < KB; ++i)
    for (int u = 0; u < U; ++u) acc[i][u] = first ? hn::Zero(d) : hn::LoadU(d, out + (j0 + i) * out_stride + d0 + u * N);
  const float* wj = w + j0 * ld;
  // Queries before the tile's last key reach only the keys at or below them.
  const int64_t full = std::max(tb, j0 + KB - 1);
  for (int64_t t = std::max(tb, j0); t < std::min(te, full); ++t) {
    VF yv[U];
    for (int u = 0; u < U; ++u) yv[u] = hn::LoadU(d, y + t * y_stride + d0 + u * N);
    for (int i = 0; i < KB && j0 + i <= t; ++i) {
      const VF wv = hn::Set(d, wj[i * ld + t]);
      for (int u = 0; u < U; ++u) acc[i][u] = hn::MulAdd(wv, yv[u], acc[i][u]);
    }
  }
  for (int64_t t = full; t < te; ++t) {
    VF yv[U];
    for (int u = 0; u < U; ++u) yv[u] = hn::LoadU(d, y + t * y_stride + d0 + u * N);
    for (int i = 0; i < KB; ++i) {
      const VF wv = hn::Set(d, wj[i * ld + t]);
      for (int u = 0; u < U; ++u) acc[i][u] = hn::MulAdd(wv, yv[u], acc[i][u]);
    }
  }
  for (int i = 0; i < KB; ++i)
    for (int u = 0; u < U; ++u) hn::StoreU(acc[i][u], d, out + (j0 + i) * out_stride + d0 + u * N);
}

// KeyGradTile over every d.
template <int KB>
void KeyGradTiles(const float* w, int64_t ld, const float* y, int64_t y_stride, int32_t head_dim, int64_t j0,
                  int64_t tb, int64_t te, bool first, float* out, int64_t out_stride) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
  int32_t d0 = 0;
  for (; d0 + 4 * N <= head_dim; d0 += static_cast<int32_t>(4 * N))
    KeyGradTile<KB, 4>(w, ld, y, y_stride, j0, tb, te, d0, first, out, out_stride);
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
  constexpr int KB = 3;
  for (int64_t c0 = 0; c0 < T; c0 += kChunk) {
    const int64_t c1 = std::min(T, c0 + kChunk);
    // Keys below the chunk continue their chains; the chunk's own keys start theirs.
    auto keys = [&](int64_t jb, int64_t je, bool first) {
      int64_t j0 = jb;
      for (; j0 + KB <= je; j0 += KB) KeyGradTiles<KB>(w, ld, y, head_dim, head_dim, j0, c0, c1, first, out, out_stride);
      for (; j0 < je; ++j0) KeyGradTiles<1>(w, ld, y, head_dim, head_dim, j0, c0, c1, first, out, out_stride);
    };
    keys(0, c0, false);
    keys(c0, c1, first_head);
  }
}

// dst [T][head_dim] = the rows of x (row stride x_stride), contiguous: rows of the fused qkv
// layout lie a few KiB apart, which would put a chunk's rows into a few L1 sets.
void PackRows(const float* x, int64_t x_stride, int64_t T, int32_t head_dim, float* dst) {
  const DF d;
  const int32_t N = static_cast<int32_t>(hn::Lanes(d));
  for (int64_t t = 0; t < T; ++t) {
    const float* src = x + t * x_stride;
    float* out = dst + t * head_dim;
    int32_t e = 0;
    for (; e + N <= head_dim; e += N) hn::StoreU(hn::LoadU(d, src + e), d, out + e);
    for (; e < head_dim; ++e) out[e] = src[e];
  }
}

// xt[e][i] = x_{t0+i}[e] for the block's `count` queries, zero past them.
void PackBlock(const float* x, int64_t x_stride, int64_t count, int32_t head_dim, int64_t B, float* xt) {
  for (int32_t e = 0; e < head_dim; ++e) {
    float* row = xt + static_cast<int64_t>(e) * B;
    for (int64_t i = 0; i < count; ++i) row[i] = x[i * x_stride + e];
    std::fill(row + count, row + B, 0.0f);
  }
}

void AttentionBackward(const float* HWY_RESTRICT q, int64_t q_stride, const float* HWY_RESTRICT k,
                       const float* HWY_RESTRICT kt, const float* HWY_RESTRICT v, const float* HWY_RESTRICT vt,
                       int64_t kv_stride, int64_t ldt, const float* HWY_RESTRICT dout, int64_t dout_stride,
                       float* HWY_RESTRICT dq, float* HWY_RESTRICT dk, float* HWY_RESTRICT dv, int64_t dkv_stride,
                       int64_t T, int32_t group, int32_t head_dim, float scale, float* HWY_RESTRICT scratch) {
  (void)kt;  // the rows of k and v are all this kernel reads
  (void)vt;
  (void)ldt;
  const int64_t B = BlockQueries(), ld = ScratchRow(T), rows = T * head_dim;
  float* pt = scratch;
  float* st = pt + T * ld;
  float* kp = st + T * ld;
  float* vp = kp + rows;
  float* qp = vp + rows;
  float* op = qp + rows;
  float* qt = op + rows;
  float* ot = qt + static_cast<int64_t>(head_dim) * B;
  PackRows(k, kv_stride, T, head_dim, kp);
  PackRows(v, kv_stride, T, head_dim, vp);
  // Head by head: dk and dv chains run over the heads, then the queries.
  for (int32_t h = 0; h < group; ++h) {
    const int64_t off = static_cast<int64_t>(h) * head_dim;
    PackRows(q + off, q_stride, T, head_dim, qp);
    PackRows(dout + off, dout_stride, T, head_dim, op);
    for (int64_t t0 = 0; t0 < T; t0 += B) {
      const int64_t count = std::min(B, T - t0), n = t0 + count;
      PackBlock(qp + t0 * head_dim, head_dim, count, head_dim, B, qt);
      PackBlock(op + t0 * head_dim, head_dim, count, head_dim, B, ot);
      KeyTiles(qt, B, kp, head_dim, n, head_dim, &scale, pt + t0, ld);
      KeyTiles(ot, B, vp, head_dim, n, head_dim, nullptr, st + t0, ld);
      BlockSoftmax(pt + t0, st + t0, ld, t0, n, scale);
      QueryGrads(st, ld, kp, head_dim, t0, n, head_dim, dq + off, q_stride);
    }
    KeyGrads(st, ld, T, qp, head_dim, h == 0, dk, dkv_stride);
    KeyGrads(pt, ld, T, op, head_dim, h == 0, dv, dkv_stride);
  }
}

#else

// The portable fallback: the reference itself.
int64_t ScratchFloats(int64_t T, int32_t group, int32_t) { return 2 * group * T * T; }

void AttentionBackward(const float* q, int64_t q_stride, const float* k, const float* kt, const float* v,
                       const float* vt, int64_t kv_stride, int64_t ldt, const float* dout, int64_t dout_stride,
                       float* dq, float* dk, float* dv, int64_t dkv_stride, int64_t T, int32_t group,
                       int32_t head_dim, float scale, float* scratch) {
  (void)kt;
  (void)vt;
  (void)ldt;
  ref::attention_backward<float>(q, q_stride, k, v, kv_stride, dout, dout_stride, dq, dk, dv, dkv_stride, T, group,
                                 head_dim, scale, scratch);
}

#endif

void FillAttentionBackward(Kernels& k) {
  k.attention_backward = &AttentionBackward;
  k.attention_backward_scratch = &ScratchFloats;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
