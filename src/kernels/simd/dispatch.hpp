// Choosing a SIMD target at run time. The choice lives in the model (its packed weights name the
// kernels they were packed for: model/packed_weights.hpp, kernels_for); nothing here is global or
// mutable.
#pragma once

#include <vector>

#include "kernels/simd/kernels.hpp"

namespace lockstep::simd {

// Every compiled target this CPU can run, best first; the portable std::fma fallback is last.
std::vector<const Kernels*> supported_kernels();
// The best of them.
const Kernels& best_kernels();

}  // namespace lockstep::simd
