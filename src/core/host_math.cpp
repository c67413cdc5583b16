#include "core/host_math.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace lockstep {
namespace {

constexpr double kLn2Hi = std::bit_cast<double>(uint64_t{0x3FE62E42FEE00000});  // 32 bits of ln 2
constexpr double kLn2Lo = std::bit_cast<double>(uint64_t{0x3DEA39EF35793C76});  // ln 2 - kLn2Hi
constexpr double kInvLn2 = 1.4426950408889634074;
constexpr double kSqrt2 = 1.4142135623730950488;
// pi/2 as three 33-bit parts (Cody and Waite), so that k * part is exact for |k| < 2^20.
constexpr double kPio2_1 = std::bit_cast<double>(uint64_t{0x3FF921FB54400000});
constexpr double kPio2_2 = std::bit_cast<double>(uint64_t{0x3DD0B4611A600000});
constexpr double kPio2_3 = std::bit_cast<double>(uint64_t{0x3BA3198A2E000000});
constexpr double kTwoOverPi = 0.63661977236758134308;

double pow2(int k) {  // 2^k for -1022 <= k <= 1023
  return std::bit_cast<double>(static_cast<uint64_t>(k + 1023) << 52);
}

}  // namespace

double host_sqrt(double x) { return std::sqrt(x); }  // IEEE-754 sqrt, correctly rounded

double host_round(double x) {
  // Adding and subtracting 1.5 * 2^52 rounds to an integer in the current (nearest) mode.
  constexpr double kMagic = 6755399441055744.0;
  if (x >= 0) return (x + kMagic) - kMagic;
  return -((-x + kMagic) - kMagic);
}

double host_log(double x) {
  if (x != x) return x;
  if (x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<double>::infinity();
  if (x == std::numeric_limits<double>::infinity()) return x;
  int e = 0;
  if (x < 0x1p-1022) {  // subnormal: scale into the normal range first
    x *= 0x1p54;
    e = -54;
  }
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  e += static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  double m = std::bit_cast<double>((bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52));
  if (m > kSqrt2) {
    m *= 0.5;
    e += 1;
  }
  // log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: the odd series to s^27.
  const double f = m - 1.0;
  const double s = f / (2.0 + f);
  const double s2 = s * s;
  double p = 1.0 / 27.0;
  for (int k = 12; k >= 0; --k) p = p * s2 + 1.0 / static_cast<double>(2 * k + 1);
  const double log_m = 2.0 * s * p;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (de * kLn2Lo + log_m);
}

double host_exp(double x) {
  if (x != x) return x;
  if (x > 709.79) return std::numeric_limits<double>::infinity();
  if (x < -745.2) return 0.0;
  const double k = host_round(x * kInvLn2);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;  // |r| <= 0.35
  // Taylor series to r^14: the remainder is below 2^-60 relative.
  double p = 1.0;
  for (int n = 14; n >= 1; --n) p = 1.0 + p * r / static_cast<double>(n);
  const int ki = static_cast<int>(k);
  const int a = ki / 2;
  return p * pow2(a) * pow2(ki - a);  // two steps keep both factors normal
}

void host_sincos(double x, double* sin_out, double* cos_out) {
  if (!(x >= -0x1p20 && x <= 0x1p20)) {
    *sin_out = *cos_out = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  const double k = host_round(x * kTwoOverPi);
  const double r = ((x - k * kPio2_1) - k * kPio2_2) - k * kPio2_3;  // |r| <= pi/4 (+tiny)
  const double r2 = r * r;
  // Taylor series of sin to r^21 and cos to r^20: remainders below 2^-64 on |r| <= pi/4.
  double s = 1.0;
  for (int n = 21; n >= 3; n -= 2) s = 1.0 - s * r2 / static_cast<double>(n * (n - 1));
  s *= r;
  double c = 1.0;
  for (int n = 20; n >= 2; n -= 2) c = 1.0 - c * r2 / static_cast<double>(n * (n - 1));
  const int64_t q = static_cast<int64_t>(k) & 3;
  switch (q) {
    case 0: *sin_out = s; *cos_out = c; break;
    case 1: *sin_out = c; *cos_out = -s; break;
    case 2: *sin_out = -s; *cos_out = -c; break;
    default: *sin_out = -c; *cos_out = s; break;
  }
}

double host_cos(double x) {
  double s, c;
  host_sincos(x, &s, &c);
  return c;
}

double host_sin(double x) {
  double s, c;
  host_sincos(x, &s, &c);
  return s;
}

}  // namespace lockstep
