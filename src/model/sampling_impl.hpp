// sample_token with the SIMD target named: what Generator calls with its model's kernels, so
// that a generation runs one target throughout, the one its model was packed for (the best this
// CPU runs, or the one ModelOptions::simd_target forces). Every target's exp has ref::exp_f32's
// bits (exactness_test), so the choice of target changes no bit; it only keeps a forced target
// forced. tests/model/sampler_test.cpp checks each target this way.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/simd/kernels.hpp"
#include "lockstep/sampling.hpp"

namespace lockstep {

int32_t sample_token(std::span<const float> logits, const SamplingOptions& options, int64_t step, SampleTrace* trace,
                     const simd::Kernels& kernels);

}  // namespace lockstep
