// The machine's FMA peak, measured in the same run as the kernels it judges: independent chains
// of vector FMAs, enough of them to cover the FMA latency on every target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/targets.h>

#include <cstdint>

HWY_BEFORE_NAMESPACE();
namespace lockstep::bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns the flops done (2 per lane per fma); `sink` keeps the result alive.
double FmaChains(int64_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, 1.0f), a1 = hn::Set(d, 1.1f), a2 = hn::Set(d, 1.2f), a3 = hn::Set(d, 1.3f);
  auto a4 = hn::Set(d, 1.4f), a5 = hn::Set(d, 1.5f), a6 = hn::Set(d, 1.6f), a7 = hn::Set(d, 1.7f);
  auto a8 = hn::Set(d, 1.8f), a9 = hn::Set(d, 1.9f), a10 = hn::Set(d, 2.0f), a11 = hn::Set(d, 2.1f);
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = hn::MulAdd(a0, m, c); a1 = hn::MulAdd(a1, m, c); a2 = hn::MulAdd(a2, m, c);
    a3 = hn::MulAdd(a3, m, c); a4 = hn::MulAdd(a4, m, c); a5 = hn::MulAdd(a5, m, c);
    a6 = hn::MulAdd(a6, m, c); a7 = hn::MulAdd(a7, m, c); a8 = hn::MulAdd(a8, m, c);
    a9 = hn::MulAdd(a9, m, c); a10 = hn::MulAdd(a10, m, c); a11 = hn::MulAdd(a11, m, c);
  }
  auto sum = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  sum = hn::Add(sum, hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)));
  *sink = hn::GetLane(sum);
  return 2.0 * 12.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

// Reads n words once, in order (the DRAM read bandwidth when n far exceeds the caches): integer adds
// over four vector accumulators, so the loads, not the adds, bound it. Returns the sum.
uint32_t ReadStream(const uint32_t* HWY_RESTRICT p, int64_t n) {
  const hn::ScalableTag<uint32_t> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::Add(s0, hn::LoadU(d, p + i));
    s1 = hn::Add(s1, hn::LoadU(d, p + i + N));
    s2 = hn::Add(s2, hn::LoadU(d, p + i + 2 * N));
    s3 = hn::Add(s3, hn::LoadU(d, p + i + 3 * N));
  }
  uint32_t out = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
  for (; i < n; ++i) out += p[i];
  return out;
}

}  // namespace HWY_NAMESPACE
}  // namespace lockstep::bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lockstep::bench {
HWY_EXPORT(FmaChains);
HWY_EXPORT(ReadStream);
uint32_t read_stream(const uint32_t* p, int64_t n) { return HWY_DYNAMIC_DISPATCH(ReadStream)(p, n); }
double fma_chains(int64_t iterations, float* sink) { return HWY_DYNAMIC_DISPATCH(FmaChains)(iterations, sink); }
// The same chains in AVX2's 8-lane vectors (the peak of the library's AVX2 code on a CPU that has
// AVX-512 too); 0 where AVX2 is not compiled or not supported.
double fma_chains_avx2(int64_t iterations, float* sink) {
#if HWY_TARGETS & HWY_AVX2
  if (hwy::SupportedTargets() & HWY_AVX2) return N_AVX2::FmaChains(iterations, sink);
#endif
  (void)iterations;
  (void)sink;
  return 0;
}
}  // namespace lockstep::bench
#endif
