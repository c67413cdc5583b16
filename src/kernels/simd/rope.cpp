// RoPE on interleaved pairs. A vector holds pairs (v0, v1); with c and s duplicated per pair and
// the sign of s flipped on even lanes, v * c + swap(v) * s' gives v0 c - v1 s and v1 c + v0 s:
// the same two rounded products and one rounded sum per element as ref::rope.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/simd/rope.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "kernels/ref/ops.hpp"
#include "kernels/simd/kernels.hpp"

HWY_BEFORE_NAMESPACE();
namespace lockstep::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_NATIVE_FMA

// sign = -1: the forward rotation (even lanes take -s); sign = +1: its transpose, the backward.
template <int kSign>
void Rotate(float* HWY_RESTRICT v, int32_t n_heads, int32_t head_dim, const float* HWY_RESTRICT cos_row,
            const float* HWY_RESTRICT sin_row) {
  const hn::ScalableTag<float> d;
  const int32_t N = static_cast<int32_t>(hn::Lanes(d));
  const int32_t vec_end = head_dim - head_dim % N;  // N is even: vectors hold whole pairs
  constexpr int32_t kChunk = 64;                      // pairs of the duplicated tables at a time
  HWY_ALIGN float cd[2 * kChunk];
  HWY_ALIGN float sd[2 * kChunk];
  for (int32_t base = 0; base < vec_end; base += 2 * kChunk) {
    const int32_t end = std::min(vec_end, base + 2 * kChunk);
    for (int32_t e = base; e < end; ++e) {
      cd[e - base] = cos_row[e / 2];
      sd[e - base] = ((e % 2 == 0) == (kSign < 0)) ? -sin_row[e / 2] : sin_row[e / 2];
    }
    for (int32_t h = 0; h < n_heads; ++h) {
      float* x = v + static_cast<int64_t>(h) * head_dim;
      for (int32_t e = base; e < end; e += N) {
        const auto xv = hn::LoadU(d, x + e);
        const auto swapped = hn::Shuffle2301(xv);
        const auto out = hn::Add(hn::Mul(xv, hn::Load(d, cd + (e - base))),
                                 hn::Mul(swapped, hn::Load(d, sd + (e - base))));
        hn::StoreU(out, d, x + e);
      }
    }
  }
  for (int32_t h = 0; h < n_heads; ++h) {
    float* x = v + static_cast<int64_t>(h) * head_dim;
    for (int32_t i = vec_end / 2; i < head_dim / 2; ++i) {
      const float c = cos_row[i], s = sin_row[i];
      const float v0 = x[2 * i], v1 = x[2 * i + 1];
      if (kSign < 0) {
        x[2 * i] = v0 * c - v1 * s;
        x[2 * i + 1] = v0 * s + v1 * c;
      } else {
        x[2 * i] = v0 * c + v1 * s;
        x[2 * i + 1] = v1 * c - v0 * s;
      }
    }
  }
}

void FillRope(Kernels& k) {
  k.rope = &Rotate<-1>;
  k.rope_backward = &Rotate<1>;
}

#else

void FillRope(Kernels& k) {
  k.rope = &ref::rope<float>;
  k.rope_backward = &ref::rope_backward<float>;
}

#endif

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::simd
HWY_AFTER_NAMESPACE();
