// Double-precision elementary functions built from IEEE-754 add, subtract, multiply, divide and
// sqrt only, so that their bits are the same on every machine and compiler. They compute tables
// (RoPE angles) and initial weights, which are rounded to f32 afterwards; the f32 functions the
// forward pass uses live in kernels/ref/math.hpp. Accuracy: a few ulp of double, far below the
// f32 rounding that follows.
#pragma once

namespace lockstep {

inline constexpr double kHostPi = 3.141592653589793116;  // the double nearest pi

double host_sqrt(double x);
// Natural logarithm; NaN for x < 0, -inf for 0.
double host_log(double x);
// e^x; 0 below -745.2, +inf above 709.79.
double host_exp(double x);
// sin and cos of x for |x| <= 2^20 (the domain lockstep's tables use); NaN outside.
void host_sincos(double x, double* sin_out, double* cos_out);
double host_cos(double x);
double host_sin(double x);
// x rounded to the nearest integer, ties to even, for |x| < 2^51.
double host_round(double x);

}  // namespace lockstep
