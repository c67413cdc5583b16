// Prefill's tiles of queries over long windows (attention_queries with more than three queries,
// kernels/simd/attention.cpp) against ref::attention, with memcmp, for every SIMD target this
// machine runs, keys and values in the fast path's blocks of 16 positions (values also as rows):
// windows T around the tile's spans (64 to 320 keys with the head dims below and spans of 16 or
// 32 KB), the key blocks and vector widths up to 2053 keys, the head dims of s256 (32) and l768
// (64) and one that is neither (24), tiles of 4 to 100 queries (past kMaxTileQueries, which
// splits), tiles starting anywhere (a cached prefix), equal and spread lengths. The reference runs
// once per case and every target is compared with it; windows of 1031 and 2053 compute three
// tiles each (the first, one from mid-window, the last), shorter ones every tile of the window.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/ref/ops.hpp"
#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"
#include "support/blocked_keys.hpp"
#include "support/test_util.hpp"

namespace lockstep {
namespace {

using simd::Kernels;

// One window: keys and values as rows [T][stride] (the reference's layout), both also in the
// fast path's blocks (the second head of two, `dim` = 2 hd: kt's and vt's head starts at hd * 16;
// the other head's floats and the last block's past T are NaN, which no output may read),
// queries at q_stride, outputs at out_stride.
struct Window {
  int64_t T, dim, stride, q_stride, out_stride;
  int32_t hd;
  std::vector<float> q, keys, values, kt, vt;
};

Window make_window(int64_t T, int32_t hd, uint64_t seed) {
  Window w{T, 2 * int64_t{hd}, hd + 5, hd + 2, hd + 1, hd, {}, {}, {}, {}, {}};
  w.q = test::random_floats(T * w.q_stride, seed);
  w.keys = test::random_floats(T * w.stride, seed + 1);
  w.values = test::random_floats(T * w.stride, seed + 2);
  const float nan = std::bit_cast<float>(0x7fc00001u);
  w.kt = test::blocked_keys(w.keys.data(), w.stride, T, hd, w.dim, hd, nan);
  w.vt = test::blocked_values(w.values.data(), w.stride, T, hd, w.dim, 1, nan);
  return w;
}

// A tile: queries t0 .. t0 + n.size() - 1 (query rows of the window), query i reading n[i] keys.
struct Tile {
  int64_t t0;
  std::vector<int64_t> n;
};

std::vector<float> reference(const Window& w, const Tile& tile) {
  const int64_t nq = static_cast<int64_t>(tile.n.size());
  std::vector<float> out(static_cast<size_t>(nq * w.out_stride), 0.0f), scores(static_cast<size_t>(w.T));
  const float scale = ref::attention_scale<float>(w.hd);
  for (int64_t i = 0; i < nq; ++i)
    ref::attention(w.q.data() + (tile.t0 + i) * w.q_stride, w.keys.data(), w.values.data(), w.stride,
                   tile.n[static_cast<size_t>(i)], w.hd, scale, out.data() + i * w.out_stride, scores.data());
  return out;
}

// The values in their blocks (the KV cache's layout), or with `value_rows` as the rows.
std::vector<float> fast(const Kernels& k, const Window& w, const Tile& tile, bool value_rows = false) {
  const int nq = static_cast<int>(tile.n.size());
  const int64_t n_max = tile.n.back();
  std::vector<float> out(static_cast<size_t>(nq * w.out_stride), 0.0f);
  // Scratch poisoned with NaN: nothing may read what it did not write.
  std::vector<float> scratch(static_cast<size_t>(k.attention_queries_scratch(nq, n_max, w.hd)),
                             std::bit_cast<float>(0x7fc00001u));
  const int64_t bs = simd::key_block_stride(w.dim);
  const float* v = value_rows ? w.values.data() : w.vt.data() + w.hd * simd::kKeysPerBlock;
  k.attention_queries(w.q.data() + tile.t0 * w.q_stride, w.q_stride, tile.n.data(), nq,
                      w.kt.data() + w.hd * simd::kKeysPerBlock, bs, v, value_rows ? w.stride : w.hd,
                      value_rows ? simd::kKeysPerBlock * w.stride : bs, w.hd, ref::attention_scale<float>(w.hd),
                      out.data(), w.out_stride, scratch.data());
  return out;
}

using test::expect_same;

// The tiles of q queries covering positions [0, T) of a prefill (query t reads t + 1 keys), or,
// for long windows, three of them: the first, one starting mid-window at an odd position, the last.
std::vector<Tile> prefill_tiles(int64_t T, int q) {
  std::vector<int64_t> starts;
  if (T <= 257) {
    for (int64_t t = 0; t < T; t += q) starts.push_back(t);
  } else {
    starts = {0, T / 2 - 5, std::max<int64_t>(0, T - q)};
  }
  std::vector<Tile> tiles;
  for (int64_t t0 : starts) {
    Tile tile{t0, {}};
    for (int64_t t = t0; t < std::min(T, t0 + q); ++t) tile.n.push_back(t + 1);
    tiles.push_back(tile);
  }
  return tiles;
}

TEST(AttentionTile, PrefillTilesOverLongWindowsEqualTheReference) {
  const auto targets = simd::supported_kernels();
  uint64_t seed = 4000;
  for (int64_t T : {1, 7, 63, 64, 65, 129, 257, 1031, 2053}) {
    for (int32_t hd : {32, 64, 24}) {
      const Window w = make_window(T, hd, seed);
      seed += 3;
      for (int q : {4, 5, 48, 64, 100}) {
        if (T > 257 && q != 48 && hd != 64) continue;  // long windows: every tile size at hd 64 only
        for (const Tile& tile : prefill_tiles(T, q)) {
          const auto want = reference(w, tile);
          for (const Kernels* k : targets)
            expect_same(fast(*k, w, tile), want,
                        std::string(k->name) + " T=" + std::to_string(T) + " hd=" + std::to_string(hd) +
                            " tile of " + std::to_string(tile.n.size()) + " at " + std::to_string(tile.t0));
        }
      }
    }
  }
}

// count lengths from 1, `step` apart.
std::vector<int64_t> spread(int count, int64_t step) {
  std::vector<int64_t> n;
  for (int i = 0; i < count; ++i) n.push_back(1 + i * step);
  return n;
}

TEST(AttentionTile, EqualAndSpreadLengthsEqualTheReference) {
  // Lengths not one apart: equal (the heads of a group at one position), spread by 2 to 100 keys
  // (so that some queries' keys end blocks before others'), a tile whose first query reads 1 key,
  // and tiles of 16 to 33 such queries.
  const auto targets = simd::supported_kernels();
  uint64_t seed = 5000;
  for (int32_t hd : {32, 64, 40}) {
    const Window w = make_window(700, hd, seed);
    seed += 3;
    const std::vector<std::vector<int64_t>> patterns = {
        std::vector<int64_t>(6, 300), std::vector<int64_t>(9, 1), {1, 2, 70, 130, 131, 500, 699, 700},
        // A decode step's group of query heads: 4 (Llama 3.2 1B's) and 8 (TinyLlama's), which
        // AVX-512 runs 6 at most at a time (4 and 4).
        std::vector<int64_t>(4, 700), std::vector<int64_t>(8, 513),
        {5, 100, 200, 300, 400}, {64, 64, 65, 128, 129, 129, 256},
        // Whole vectors of queries (the x86 targets sum l with the queries in lanes) whose keys end
        // in different blocks, equal, and far apart.
        std::vector<int64_t>(16, 300),
        {1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 377, 400, 500, 600, 650, 700},
        spread(33, 21)};
    for (const auto& n : patterns) {
      const Tile tile{0, n};
      const auto want = reference(w, tile);
      for (const Kernels* k : targets)
        for (const bool rows : {false, true})
          expect_same(fast(*k, w, tile, rows), want,
                      std::string(k->name) + " hd=" + std::to_string(hd) + " " + std::to_string(n.size()) +
                          " queries up to " + std::to_string(n.back()) + " keys" + (rows ? ", values as rows" : ""));
    }
  }
}

// Infinities and NaNs where the queries read them, which the softmax's exponentials see as NaN
// differences and -inf (and, past -104, as zeros): a key with +inf in one dimension (scores of
// +inf and -inf, so maxima of +inf and inf - inf), a key 1e30 in every dimension (scores far
// above the rest, whose exponentials underflow, or infinite), a key with -inf, a value with +inf
// (times an exponential that is 0: NaN), and a query with a NaN (every score of it NaN, its
// maximum -inf). Each output meets at most one NaN payload. Tiles of 1 to 48 queries at every
// start, and the single query's kernel (decode), against the reference.
TEST(AttentionTile, InfinitiesAndNaNsInTheWindowEqualTheReference) {
  const auto targets = simd::supported_kernels();
  const float inf = std::numeric_limits<float>::infinity();
  uint64_t seed = 6000;
  for (int32_t hd : {32, 64}) {
    Window w = make_window(300, hd, seed);
    seed += 3;
    w.keys[static_cast<size_t>(5 * w.stride)] = inf;
    for (int32_t e = 0; e < hd; ++e) w.keys[static_cast<size_t>(17 * w.stride + e)] = 1e30f;
    w.keys[static_cast<size_t>(100 * w.stride + 1)] = -inf;
    w.values[static_cast<size_t>(9 * w.stride + 1)] = inf;
    w.q[static_cast<size_t>(40 * w.q_stride + 3)] = std::bit_cast<float>(0x7fc00001u);
    const float nan = std::bit_cast<float>(0x7fc00001u);
    w.kt = test::blocked_keys(w.keys.data(), w.stride, w.T, hd, w.dim, hd, nan);
    w.vt = test::blocked_values(w.values.data(), w.stride, w.T, hd, w.dim, 1, nan);
    for (int q : {1, 3, 4, 48}) {
      for (const Tile& tile : prefill_tiles(w.T, q)) {
        const auto want = reference(w, tile);
        for (const Kernels* k : targets)
          expect_same(fast(*k, w, tile), want,
                      std::string(k->name) + " specials hd=" + std::to_string(hd) + " tile of " +
                          std::to_string(tile.n.size()) + " at " + std::to_string(tile.t0));
      }
    }
    for (int64_t t : {0, 5, 9, 17, 40, 41, 100, 299}) {
      const Tile one{t, {t + 1}};
      const auto want = reference(w, one);
      for (const Kernels* k : targets) {
        std::vector<float> got(static_cast<size_t>(w.out_stride), 0.0f), scores(static_cast<size_t>(w.T) + 64);
        k->attention(w.q.data() + t * w.q_stride, w.kt.data() + w.hd * simd::kKeysPerBlock, simd::key_block_stride(w.dim),
                     w.vt.data() + w.hd * simd::kKeysPerBlock, w.hd, simd::key_block_stride(w.dim), t + 1, w.hd,
                     ref::attention_scale<float>(w.hd), got.data(), scores.data());
        expect_same(got, want, std::string(k->name) + " specials, one query at " + std::to_string(t));
      }
    }
  }
}

}  // namespace
}  // namespace lockstep
