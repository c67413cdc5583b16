// Cross-entropy at one position (ref::cross_entropy): the max and the exponentials run in
// vectors; the sum of the exponentials stays one chain in increasing j.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/loss.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <limits>

#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"
#include "kernels/simd/kernels.hpp"
#include "kernels/simd/math-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

// max_j z_j, NaN skipped (ref::max_skip_nan's value).
float MaxOf(const float* HWY_RESTRICT z, int32_t vocab) {
  const hn::ScalableTag<float> d;
  const int32_t N = static_cast<int32_t>(hn::Lanes(d));
  auto mv = hn::Set(d, -std::numeric_limits<float>::infinity());
  int32_t j = 0;
  for (; j + N <= vocab; j += N) mv = MaxSkipNaN(mv, hn::LoadU(d, z + j));
  float m = -std::numeric_limits<float>::infinity();
  for (; j < vocab; ++j) m = ref::max_skip_nan(m, z[j]);
  return ReduceMaxSkipNaN(d, mv, m);
}

float CrossEntropy(const float* HWY_RESTRICT z, int32_t vocab, int32_t target) {
  const hn::ScalableTag<float> d;
  const int32_t N = static_cast<int32_t>(hn::Lanes(d));
  const float m = MaxOf(z, vocab);
  const auto m_v = hn::Set(d, m);
  constexpr int32_t kChunk = 256;
  HWY_ALIGN float e[kChunk];
  float sum = 0.0f;
  for (int32_t base = 0; base < vocab; base += kChunk) {
    const int32_t end = std::min(vocab, base + kChunk);
    int32_t i = base;
    for (; i + N <= end; i += N) hn::Store(ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, z + i), m_v)), d, e + (i - base));
    for (; i < end; ++i) e[i - base] = ref::exp_f32(z[i] - m);
    for (i = base; i < end; ++i) sum = sum + e[i - base];
  }
  const float shifted = z[target] - m;
  return ref::log_f32(sum) - shifted;
}

// dz_j = (exp(z_j - m) / sum - [j == target]) / count, with m and sum as CrossEntropy; returns
// the position's loss.
float CrossEntropyBackward(const float* HWY_RESTRICT z, int32_t vocab, int32_t target, float count,
                           float* HWY_RESTRICT dz) {
  const hn::ScalableTag<float> d;
  const int32_t N = static_cast<int32_t>(hn::Lanes(d));
  const float m = MaxOf(z, vocab);
  const auto m_v = hn::Set(d, m);
  int32_t j = 0;
  // e_j into dz, then the sum in increasing j.
  for (j = 0; j + N <= vocab; j += N) hn::StoreU(ExpOfNonPositive(d, hn::Sub(hn::LoadU(d, z + j), m_v)), d, dz + j);
  for (; j < vocab; ++j) dz[j] = ref::exp_f32(z[j] - m);
  float sum = 0.0f;
  for (j = 0; j < vocab; ++j) sum = sum + dz[j];
  const float p_target = dz[target] / sum;
  const auto sum_v = hn::Set(d, sum), count_v = hn::Set(d, count);
  for (j = 0; j + N <= vocab; j += N) hn::StoreU(hn::Div(hn::Div(hn::LoadU(d, dz + j), sum_v), count_v), d, dz + j);
  for (; j < vocab; ++j) dz[j] = (dz[j] / sum) / count;
  dz[target] = (p_target - 1.0f) / count;
  return ref::log_f32(sum) - (z[target] - m);
}

void FillLoss(Kernels& k) {
  k.cross_entropy = &CrossEntropy;
  k.cross_entropy_backward = &CrossEntropyBackward;
}

#else

float CrossEntropyBackward(const float* z, int32_t vocab, int32_t target, float count, float* dz) {
  ref::cross_entropy_backward<float>(z, vocab, target, count, dz);
  return ref::cross_entropy<float>(z, vocab, target);
}

void FillLoss(Kernels& k) {
  k.cross_entropy = &ref::cross_entropy<float>;
  k.cross_entropy_backward = &CrossEntropyBackward;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
