// How the fast forward pass cuts one matmul phase into items (forward_fast.cpp): along
// independent outputs only (column panels, whole row blocks), so the split never changes a bit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>

#include "core/thread_pool.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep {

// One matmul phase's items: c [M, N] = a @ b cut into panel groups (and, when there are more
// items than panels, groups of whole row blocks), at least kMatmulWork multiply-adds each (a
// few microseconds: less would cost more in hand-overs than it shares) and at most
// kItemsPerThread per thread, so that a worker slowed by its neighbours takes fewer while the
// split stays along outputs. A one-row matmul (a decode step) is cut in whole units of
// Kernels::decode_panels panels, so that every item runs in the kernel's wide tiles (an item of
// 6 panels where the tile takes 8 used to fall to one panel at a time, its chains then bound by
// the FMA latency).
constexpr int64_t kMatmulWork = 64 << 10;
constexpr int64_t kItemsPerThread = 8;
// From this many rows per thread (a prefill), the items are first cut into one row group per
// thread, then into panel groups: thread s's share (ThreadPool::run_phases) is then row group s,
// the rows whose inputs its own share of the phase before wrote (the norms, SwiGLU and RoPE cut
// tokens the same way), so a thread reads its A from its own core's caches and the next phase
// finds C there; each thread streams all of B instead of its share, which at 64 rows a thread
// costs about a byte of B per cycle. (s256 prefill of 256 tokens on 2 threads: 1.70x of one
// thread -> 1.80x, bench/README.md.) Fewer rows (decode, a batch of decoding lanes) are cut
// into panels first: B's bytes are what they wait for.
constexpr int64_t kRowsPerThreadForRowGroups = 64;
struct MatmulItems {
  int64_t panel_groups = 1, row_groups = 1, row_blocks = 1, row_block = 1;
  int64_t panel_unit = 1, units = 1;  // panel groups are made of whole units of panel_unit panels
  int64_t count() const { return panel_groups * row_groups; }
};

inline MatmulItems matmul_items(int64_t M, const simd::PackedMatrix& b, const simd::Kernels& k, int n) {
  MatmulItems s;
  s.row_block = std::max<int32_t>(1, k.row_block);
  s.row_blocks = std::max<int64_t>(1, (M + s.row_block - 1) / s.row_block);
  s.panel_unit = M == 1 ? std::max<int32_t>(1, k.decode_panels) : 1;
  s.units = std::max<int64_t>(1, (b.panels + s.panel_unit - 1) / s.panel_unit);
  // A decode step's matrix in GGUF blocks takes about a quarter of an f32 matmul's time per
  // multiply-add (integer dot products, 4.5 to 8.5 bits a weight read): its items are 4x the
  // multiply-adds (l768 Q4_0 decode on 2 threads 1.04x, best of 3 alternating runs).
  const int64_t work = M * b.K * b.N / (b.blocks && M == 1 ? 4 : 1);
  const int64_t items = n == 1 ? 1 : std::clamp<int64_t>(work / kMatmulWork, 1, kItemsPerThread * n);
  if (n > 1 && M >= kRowsPerThreadForRowGroups * n && s.row_blocks >= n) {
    s.row_groups = n;
    s.panel_groups = std::clamp<int64_t>((items + n - 1) / n, 1, s.units);
    return s;
  }
  s.panel_groups = std::clamp<int64_t>(items, 1, s.units);
  s.row_groups = std::clamp<int64_t>((items + s.panel_groups - 1) / s.panel_groups, 1, s.row_blocks);
  return s;
}

// Item i of s: panels [first.first, first.second) over rows [second.first, second.second).
inline std::pair<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> matmul_item_range(
    int64_t M, const simd::PackedMatrix& b, const MatmulItems& s, int64_t i) {
  const auto [u0, u1] = static_range(s.units, static_cast<int>(i % s.panel_groups), static_cast<int>(s.panel_groups));
  const auto [b0, b1] = static_range(s.row_blocks, static_cast<int>(i / s.panel_groups), static_cast<int>(s.row_groups));
  return {{u0 * s.panel_unit, std::min(b.panels, u1 * s.panel_unit)}, {b0 * s.row_block, std::min(M, b1 * s.row_block)}};
}

}  // namespace lockstep
