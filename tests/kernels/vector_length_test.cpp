// Each SIMD target's vector length as it runs. SVE's length is the CPU's, known only at run time:
// a run under qemu-user with `-cpu max,sve-max-vq=N` prints the length each SVE target saw, and
// LOCKSTEP_EXPECT_VECTOR_BITS (when set) checks that the best target ran at that length, so that
// a run meant for 2048-bit vectors cannot silently test 512-bit ones (README, "Running on Arm").
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/vector_length_test.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace lockstep::test {
namespace HWY_NAMESPACE {
// Bytes per vector of this target, as this CPU runs it.
int64_t VectorBytes() { return static_cast<int64_t>(hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<uint8_t>())); }
}  // namespace HWY_NAMESPACE
}  // namespace lockstep::test
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/simd/dispatch.hpp"
#include "kernels/simd/kernels.hpp"

namespace lockstep::test {
namespace {

// The vector bytes of the kernels compiled for Highway target `target` (0 when not compiled here).
int64_t vector_bytes_of(int64_t target) {
#define LOCKSTEP_VECTOR_BYTES(T) \
  if (target == HWY_##T) return N_##T::VectorBytes();
#if HWY_TARGETS & HWY_AVX3_DL
  LOCKSTEP_VECTOR_BYTES(AVX3_DL)
#endif
#if HWY_TARGETS & HWY_AVX3
  LOCKSTEP_VECTOR_BYTES(AVX3)
#endif
#if HWY_TARGETS & HWY_AVX2
  LOCKSTEP_VECTOR_BYTES(AVX2)
#endif
#if HWY_TARGETS & HWY_SVE2_128
  LOCKSTEP_VECTOR_BYTES(SVE2_128)
#endif
#if HWY_TARGETS & HWY_SVE_256
  LOCKSTEP_VECTOR_BYTES(SVE_256)
#endif
#if HWY_TARGETS & HWY_SVE2
  LOCKSTEP_VECTOR_BYTES(SVE2)
#endif
#if HWY_TARGETS & HWY_SVE
  LOCKSTEP_VECTOR_BYTES(SVE)
#endif
#if HWY_TARGETS & HWY_NEON
  LOCKSTEP_VECTOR_BYTES(NEON)
#endif
#undef LOCKSTEP_VECTOR_BYTES
  return 0;
}

TEST(Targets, EachPrintsItsVectorLengthAndPanelsHoldWholeVectors) {
  const auto all = simd::supported_kernels();
  ASSERT_FALSE(all.empty());
  for (const simd::Kernels* k : all) {
    if (std::string(k->name) == "portable") continue;
    const int64_t bytes = vector_bytes_of(k->target);
    std::printf("SIMD target %s: %lld-bit vectors, %d-column matmul panels\n", k->name,
                static_cast<long long>(bytes * 8), k->panel_width);
    ASSERT_GT(bytes, 0) << k->name << ": not compiled into this test";
    EXPECT_EQ(bytes & (bytes - 1), 0) << k->name << ": not a power of two";
    // The matmul's panel is a whole number of the target's vectors of floats.
    EXPECT_EQ(k->panel_width * 4 % bytes, 0) << k->name;
  }
  if (const char* want = std::getenv("LOCKSTEP_EXPECT_VECTOR_BITS"); want && *want) {
    EXPECT_EQ(vector_bytes_of(all.front()->target) * 8, std::atoll(want))
        << "the best target " << all.front()->name << " runs another vector length than this run asked for";
  }
}

}  // namespace
}  // namespace lockstep::test
#endif  // HWY_ONCE
