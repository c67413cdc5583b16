// One block of memory for a model's packed matrices, advised onto huge pages.
//
// Decoding streams every weight once per token, from the last-level cache or DRAM. Packed one
// allocation per matrix, a small model's matrices (s256: 0.25-1.5 MiB each) sit on 4 KiB pages:
// 5,000 page translations a step for s256's 20 MiB, more than the TLB holds. Packed back to back
// in one block that starts on a 2 MiB boundary, the system can back it with 2 MiB pages (where
// transparent huge pages are on, `madvise` or `always`). No bit changes: only where the
// weights lie.
#pragma once

#include <cstddef>

#include "kernels/simd/kernels.hpp"

namespace lockstep::simd {

class WeightArena {
 public:
  // Reserves `max_bytes` of address space (untouched pages cost no memory); its whole 2 MiB
  // pages are advised onto huge pages, the rest stays on small ones.
  explicit WeightArena(size_t max_bytes);
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

  // n floats, 64-byte aligned, zero, after the previous ones; the arena keeps ownership (the
  // returned pointer frees nothing). Throws std::bad_alloc past the reservation.
  AlignedFloats take(size_t n);
  // Bytes take(n) uses up: n floats rounded up to whole 64-byte lines.
  static size_t bytes_for(size_t n);
  size_t used_bytes() const { return used_; }

 private:
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  char* base_ = nullptr;  // 2 MiB aligned, inside the mapping
  size_t capacity_ = 0;
  size_t used_ = 0;
};

// From `arena` when given, else aligned_floats(n).
AlignedFloats floats_from(WeightArena* arena, size_t n);

// How a packed matrix holds its values: f32 panels, their bf16 halves, int8 or 4-bit panels with
// their scales (PackedMatrix's bf16, q8 and q4).
enum class PanelStorage { f32, bf16, q8, q4 };
// Bytes a packed [K, N] matrix held as `storage` takes from an arena (its panels, then its
// scales; none: 0 bytes), as pack_concat, pack_q8_concat and pack_q4_concat take them: so that
// a caller can size one arena for many matrices before packing them (pack_weights, which knows
// the model's matrices) without knowing the panel layout.
size_t arena_bytes(const Kernels& kernels, PanelStorage storage, int64_t K, int64_t N);

}  // namespace lockstep::simd
