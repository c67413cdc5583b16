// The benchmarks that time the library in one named SIMD target (an AVX-512 machine's figure for
// an AVX2-only CPU's code) skip where the target is missing.
#pragma once

#include <algorithm>
#include <string>

#include "lockstep/model.hpp"

namespace lockstep::bench {

// Whether this build compiled the named SIMD target and this CPU runs it.
inline bool has_simd_target(const std::string& name) {
  const auto targets = simd_targets();
  return std::find(targets.begin(), targets.end(), name) != targets.end();
}

}  // namespace lockstep::bench
