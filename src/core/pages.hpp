// Giving memory back to the system while keeping its addresses: a vector of floats whose part is
// held elsewhere (packed panels) releases that part's whole pages, which read as zeros until
// written again.
#pragma once

#include <cstdint>
#include <utility>

namespace lockstep {

// Gives back the whole pages of values [offset, offset + count) of the floats at `base`
// (anonymous memory this process owns: its contents there are lost, reading zeros until written);
// returns the element range [first, last) given back, relative to `base`, empty when no whole
// page lies inside or the system refused. Two calls with the same arguments give the same range.
std::pair<int64_t, int64_t> release_float_pages(float* base, int64_t offset, int64_t count) noexcept;
// The range release_float_pages would give back, giving back nothing.
std::pair<int64_t, int64_t> whole_float_pages(const float* base, int64_t offset, int64_t count) noexcept;

}  // namespace lockstep
