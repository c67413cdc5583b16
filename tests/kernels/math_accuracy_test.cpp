// The profile's own elementary functions against libm in double (libm is fine in a test: it is
// the yardstick, not a computed path). Error bounds are in units in the last place of f32.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/host_math.hpp"
#include "kernels/ref/math.hpp"
#include "kernels/ref/ops.hpp"

namespace lockstep {
namespace {

// Distance in f32 ulps between a float and the exact (double) value.
double ulp_error(float got, double exact) {
  if (std::isinf(exact) && std::isinf(got) && (exact > 0) == (got > 0)) return 0.0;
  const float near = static_cast<float>(exact);
  const float next = std::nextafter(near, std::numeric_limits<float>::infinity());
  const double ulp = std::fabs(static_cast<double>(next) - static_cast<double>(near));
  return std::fabs(static_cast<double>(got) - exact) / (ulp == 0 ? 1e-45 : ulp);
}

TEST(ExpF32, WithinTwoUlpsOverItsNormalRange) {
  double worst = 0;
  for (uint32_t u = 0; u < (1u << 31); u += 4099) {
    for (float x : {std::bit_cast<float>(u), -std::bit_cast<float>(u)}) {
      if (!(x > -87.0f && x < 88.7f)) continue;  // results in the normal range
      worst = std::max(worst, ulp_error(ref::exp_f32(x), std::exp(static_cast<double>(x))));
    }
  }
  EXPECT_LE(worst, 2.0);
  std::printf("exp_f32 worst error: %.3f ulp\n", worst);
}

TEST(ExpF32, SpecialValues) {
  EXPECT_EQ(ref::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(ref::exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(ref::exp_f32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(ref::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(ref::exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(ref::exp_f32(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_LT(ref::exp_f32(88.7f), std::numeric_limits<float>::infinity());
  // Subnormal results round once, to the nearest subnormal.
  for (float x : {-90.0f, -95.5f, -100.0f, -103.0f}) {
    const float got = ref::exp_f32(x);
    EXPECT_GT(got, 0.0f);
    EXPECT_LE(std::fabs(static_cast<double>(got) - std::exp(static_cast<double>(x))),
              static_cast<double>(std::numeric_limits<float>::denorm_min()));
  }
}

TEST(LogF32, WithinTwoUlpsOnPositiveFloats) {
  double worst = 0;
  for (uint32_t u = 1; u < 0x7f800000u; u += 2053) {
    const float x = std::bit_cast<float>(u);
    worst = std::max(worst, ulp_error(ref::log_f32(x), std::log(static_cast<double>(x))));
  }
  EXPECT_LE(worst, 2.0);
  std::printf("log_f32 worst error: %.3f ulp\n", worst);
  EXPECT_EQ(ref::log_f32(1.0f), 0.0f);
  EXPECT_EQ(ref::log_f32(0.0f), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(ref::log_f32(-1.0f)));
  EXPECT_EQ(ref::log_f32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
}

TEST(SiluF32, CloseToExactAndSaneAtTheEnds) {
  double worst = 0;
  for (int i = -4000; i <= 4000; ++i) {
    const float g = static_cast<float>(i) / 100.0f;
    const double exact = g / (1.0 + std::exp(-static_cast<double>(g)));
    if (std::fabs(exact) < 1e-30) continue;
    worst = std::max(worst, ulp_error(ref::silu_f32(g), exact));
  }
  EXPECT_LE(worst, 4.0);
  EXPECT_EQ(ref::silu_f32(200.0f), 200.0f);
  EXPECT_EQ(ref::silu_f32(-200.0f), -0.0f);
}

TEST(HostMath, AgreesWithLibmInDouble) {
  for (double x : {1e-300, 1e-10, 0.1, 0.5, 0.9999, 1.0, 1.5, 2.0, 10.0, 10000.0, 1e300}) {
    EXPECT_NEAR(host_log(x), std::log(x), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
  for (double x : {-700.0, -20.0, -1.0, -1e-8, 0.0, 1e-8, 0.5, 1.0, 7.25, 300.0, 700.0}) {
    EXPECT_NEAR(host_exp(x) / std::exp(x), 1.0, 4e-16) << x;
  }
  for (double x = -1000.0; x <= 1000.0; x += 0.731) {
    double s, c;
    host_sincos(x, &s, &c);
    EXPECT_NEAR(s, std::sin(x), 2e-15) << x;
    EXPECT_NEAR(c, std::cos(x), 2e-15) << x;
  }
  EXPECT_EQ(host_round(2.5), 2.0);
  EXPECT_EQ(host_round(3.5), 4.0);
  EXPECT_EQ(host_round(-2.5), -2.0);
}

TEST(RopeTables, AgreeWithLibmRoundedToF32) {
  const int length = 512, hd = 64;
  std::vector<float> c(static_cast<size_t>(length * hd / 2)), s(c.size());
  ref::rope_tables(length, hd, 10000.0f, c.data(), s.data());
  int differ = 0;
  for (int pos = 0; pos < length; ++pos) {
    for (int i = 0; i < hd / 2; ++i) {
      const double angle = pos * std::pow(10000.0, -2.0 * i / hd);
      const size_t at = static_cast<size_t>(pos * hd / 2 + i);
      EXPECT_LE(ulp_error(c[at], std::cos(angle)), 1.0);
      EXPECT_LE(ulp_error(s[at], std::sin(angle)), 1.0);
      differ += c[at] != static_cast<float>(std::cos(angle));
    }
  }
  EXPECT_LT(differ, length * hd / 2 / 100);  // almost all equal the correctly rounded value
}

}  // namespace
}  // namespace lockstep
