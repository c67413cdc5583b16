// The floating-point environment the arithmetic profile needs: round to nearest even, no
// flush-to-zero, no denormals-are-zero. A host process may have changed these (a library built
// with -ffast-math turns flush-to-zero on when it loads), so every entry point that computes sets
// them on its thread for the duration and restores the caller's on return.
#pragma once

#include <cstdint>

namespace lockstep {

class FloatEnvScope {
 public:
  FloatEnvScope();
  ~FloatEnvScope();
  FloatEnvScope(const FloatEnvScope&) = delete;
  FloatEnvScope& operator=(const FloatEnvScope&) = delete;

 private:
  uint64_t saved_;
};

// The control word bits this thread has now (MXCSR on x86, FPCR on AArch64); for tests.
uint64_t float_env_bits();
// Sets flush-to-zero and denormals-are-zero on this thread, as fast-math start-up code does;
// for tests that check FloatEnvScope undoes it.
void float_env_set_fast_math_for_test();
void float_env_restore_for_test(uint64_t bits);

}  // namespace lockstep
