// The activations' quantization of the profile lockstep-int8dot-1 (ref::quantize_activations's
// twin): per block of 32 values, amax by lanewise max (NaN-free lanes from +0; the max of
// non-negative values does not depend on the order its lanes are combined in), dx = amax / 127
// (one divide), then per value one IEEE divide by dx, the round to nearest even by adding and
// subtracting 1.5 * 2^23, the clamp to [-127, 127] and a conversion of an integral value (exact).
// Every step is the reference's operation, lane by lane, so the integers and scales are its
// bits for every finite row. Vectors of at most 32 lanes (CappedTag): a block is one vector or
// several whole ones on every target, SVE at 2048 bits included.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/quantize_blocks.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "kernels/ref/blocks.hpp"
#include "kernels/simd/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using quant::kBlockValues;

#if HWY_NATIVE_FMA

// One row x [K] (K a multiple of 32) into qx [K] and dx [K / 32].
HWY_INLINE void QuantizeRow(const float* HWY_RESTRICT x, int64_t K, int8_t* HWY_RESTRICT qx, float* HWY_RESTRICT dx) {
  const hn::CappedTag<float, kBlockValues> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<int8_t, decltype(d)> d8;
  const int L = static_cast<int>(hn::Lanes(d));  // a power of two, at most 32
  const auto round = hn::Set(d, 12582912.0f), hi = hn::Set(d, 127.0f), lo = hn::Set(d, -127.0f);
  for (int64_t b = 0; b < K / kBlockValues; ++b) {
    const float* xb = x + b * kBlockValues;
    int8_t* qb = qx + b * kBlockValues;
    // Max(a, m) is a > m ? a : m lane by lane on every target for non-NaN a; a NaN activation
    // gives unpromised bits (ARITHMETIC.md), as in the reference.
    auto m = hn::Zero(d);
    for (int j = 0; j < kBlockValues; j += L) m = hn::Max(hn::Abs(hn::LoadU(d, xb + j)), m);
    const float amax = hn::GetLane(hn::MaxOfLanes(d, m));
    const float s = amax / 127.0f;
    dx[b] = s;
    if (s == 0.0f) {
      for (int j = 0; j < kBlockValues; ++j) qb[j] = 0;
      continue;
    }
    const auto sv = hn::Set(d, s);
    for (int j = 0; j < kBlockValues; j += L) {
      auto q = hn::Sub(hn::Add(hn::Div(hn::LoadU(d, xb + j), sv), round), round);
      q = hn::Min(hn::Max(q, lo), hi);
      hn::StoreU(hn::DemoteTo(d8, hn::ConvertTo(di, q)), d8, qb + j);
    }
  }
}

void QuantizeActivations(const float* x, int64_t lda, int64_t rows, int64_t K, int8_t* qx, float* dx) {
  for (int64_t r = 0; r < rows; ++r) QuantizeRow(x + r * lda, K, qx + r * K, dx + r * (K / kBlockValues));
}

#else  // the portable baseline: the reference itself

void QuantizeActivations(const float* x, int64_t lda, int64_t rows, int64_t K, int8_t* qx, float* dx) {
  for (int64_t r = 0; r < rows; ++r)
    ref::quantize_activations(x + r * lda, K, qx + r * K, dx + r * (K / kBlockValues));
}

#endif

void FillQuantizeBlocks(Kernels& k) { k.quantize_activations = &QuantizeActivations; }

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
