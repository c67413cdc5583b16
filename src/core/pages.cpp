#include "core/pages.hpp"

#include <sys/mman.h>
#include <unistd.h>

namespace lockstep {

std::pair<int64_t, int64_t> release_float_pages(float* base_ptr, int64_t offset, int64_t count) noexcept {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(base_ptr);
  const uintptr_t lo = (base + static_cast<uintptr_t>(offset) * sizeof(float) + page - 1) / page * page;
  const uintptr_t hi = (base + static_cast<uintptr_t>(offset + count) * sizeof(float)) / page * page;
  if (hi <= lo) return {0, 0};
  if (::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED) != 0) return {0, 0};
  return {static_cast<int64_t>((lo - base) / sizeof(float)), static_cast<int64_t>((hi - base) / sizeof(float))};
}

}  // namespace lockstep
