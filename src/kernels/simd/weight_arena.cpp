#include "kernels/simd/weight_arena.hpp"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace lockstep::simd {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kAlign = 64;
}  // namespace

WeightArena::WeightArena(size_t max_bytes) {
  capacity_ = (max_bytes + kAlign - 1) / kAlign * kAlign;
  if (capacity_ == 0) return;
  // A huge page's worth more, so that the block can start on a 2 MiB boundary.
  mapping_bytes_ = capacity_ + kHugePage;
  void* p = ::mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  mapping_ = p;
  const auto at = reinterpret_cast<uintptr_t>(p);
  base_ = static_cast<char*>(p) + ((kHugePage - at % kHugePage) % kHugePage);
  // Advice only (where the system has no huge pages the block stays on small ones), and only
  // for the whole 2 MiB pages: a huge page at the end would hold up to 2 MiB of nothing.
  if (const size_t whole = capacity_ / kHugePage * kHugePage; whole > 0) (void)::madvise(base_, whole, MADV_HUGEPAGE);
}

WeightArena::~WeightArena() {
  if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

size_t WeightArena::bytes_for(size_t n) { return (n * sizeof(float) + kAlign - 1) / kAlign * kAlign; }

AlignedFloats WeightArena::take(size_t n) {
  const size_t bytes = bytes_for(n);
  if (bytes > capacity_ - used_) throw std::bad_alloc();
  float* p = reinterpret_cast<float*>(base_ + used_);
  used_ += bytes;
  return AlignedFloats(p, AlignedFree{false});
}

AlignedFloats floats_from(WeightArena* arena, size_t n) { return arena ? arena->take(n) : aligned_floats(n); }

}  // namespace lockstep::simd
