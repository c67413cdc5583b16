// One Kernels table per compiled target, and the run-time choice among those the CPU supports.
// Targets without hardware FMA (SSSE3, SSE4) are not compiled (CMake sets HWY_DISABLED_TARGETS);
// the baseline target Highway always compiles has none either, and its table holds the portable
// std::fma kernels, named "portable".
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/table.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <algorithm>
#include <string_view>

#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {

// Defined in the op-family files for this target.
void FillMatmul(Kernels& k);
void FillMatmulBlocks(Kernels& k);
void FillQuantizeBlocks(Kernels& k);
void FillNorm(Kernels& k);
void FillRope(Kernels& k);
void FillAttention(Kernels& k);
void FillAttentionSequence(Kernels& k);
void FillActivation(Kernels& k);
void FillLoss(Kernels& k);
void FillOptimizer(Kernels& k);

const Kernels* GetKernels() {
  // Built once, then only read: a constant table, not state.
  static const Kernels table = [] {
    Kernels k;
    k.target = HWY_TARGET;
    k.name = HWY_NATIVE_FMA ? hwy::TargetName(HWY_TARGET) : "portable";
    FillMatmul(k);
    FillMatmulBlocks(k);
    FillQuantizeBlocks(k);
    FillNorm(k);
    FillRope(k);
    FillAttention(k);
    FillAttentionSequence(k);
    FillActivation(k);
    FillLoss(k);
    FillOptimizer(k);
    return k;
  }();
  return &table;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lockstep::simd {

std::vector<const Kernels*> supported_kernels() {
  const int64_t supported = static_cast<int64_t>(hwy::SupportedTargets());
  std::vector<const Kernels*> out;
  const Kernels* portable = nullptr;
  // A target's table is built by code compiled for that target, so it is only asked for when the
  // CPU supports the target. Best first; each N_<TARGET> namespace exists only when compiled.
  auto add = [&](int64_t target, const Kernels* (*get)()) {
    if ((target & supported) == 0) return;
    const Kernels* k = get();
    if (std::string_view(k->name) != "portable") {
      out.push_back(k);
    } else if (!portable) {
      portable = k;
    }
  };
#if HWY_TARGETS & HWY_AVX3_DL
  add(HWY_AVX3_DL, &N_AVX3_DL::GetKernels);
#endif
#if HWY_TARGETS & HWY_AVX3
  add(HWY_AVX3, &N_AVX3::GetKernels);
#endif
#if HWY_TARGETS & HWY_AVX2
  add(HWY_AVX2, &N_AVX2::GetKernels);
#endif
#if HWY_TARGETS & HWY_SVE2_128
  add(HWY_SVE2_128, &N_SVE2_128::GetKernels);
#endif
#if HWY_TARGETS & HWY_SVE_256
  add(HWY_SVE_256, &N_SVE_256::GetKernels);
#endif
#if HWY_TARGETS & HWY_SVE2
  add(HWY_SVE2, &N_SVE2::GetKernels);
#endif
#if HWY_TARGETS & HWY_SVE
  add(HWY_SVE, &N_SVE::GetKernels);
#endif
#if HWY_TARGETS & HWY_NEON
  add(HWY_NEON, &N_NEON::GetKernels);
#endif
#if HWY_TARGETS & HWY_EMU128
  add(HWY_EMU128, &N_EMU128::GetKernels);
#endif
#if HWY_TARGETS & HWY_SCALAR
  add(HWY_SCALAR, &N_SCALAR::GetKernels);
#endif
  if (portable) out.push_back(portable);
  return out;
}

const Kernels& best_kernels() {
  const std::vector<const Kernels*> all = supported_kernels();
  return *all.front();
}

}  // namespace lockstep::simd
#endif  // HWY_ONCE
