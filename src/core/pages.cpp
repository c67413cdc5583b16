#include "core/pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

namespace lockstep {

std::pair<int64_t, int64_t> whole_float_pages(const float* base_ptr, int64_t offset, int64_t count) noexcept {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(base_ptr);
  const uintptr_t lo = (base + static_cast<uintptr_t>(offset) * sizeof(float) + page - 1) / page * page;
  const uintptr_t hi = (base + static_cast<uintptr_t>(offset + count) * sizeof(float)) / page * page;
  if (hi <= lo) return {0, 0};
  return {static_cast<int64_t>((lo - base) / sizeof(float)), static_cast<int64_t>((hi - base) / sizeof(float))};
}

std::pair<int64_t, int64_t> release_float_pages(float* base, int64_t offset, int64_t count) noexcept {
  const auto [first, last] = whole_float_pages(base, offset, count);
  if (first >= last) return {0, 0};
  if (::madvise(base + first, static_cast<size_t>(last - first) * sizeof(float), MADV_DONTNEED) != 0) return {0, 0};
  return {first, last};
}

}  // namespace lockstep
