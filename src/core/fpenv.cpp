#include "core/fpenv.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace lockstep {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// MXCSR: rounding control in bits 13-14 (00 = nearest), FTZ bit 15, DAZ bit 6.
constexpr uint32_t kModeMask = (3u << 13) | (1u << 15) | (1u << 6);
uint64_t read_bits() { return _mm_getcsr(); }
void write_bits(uint64_t bits) { _mm_setcsr(static_cast<unsigned int>(bits)); }
uint64_t profile_bits(uint64_t bits) { return bits & ~uint64_t{kModeMask}; }
uint64_t fast_math_bits(uint64_t bits) { return bits | (1u << 15) | (1u << 6); }
#elif defined(__aarch64__)
// FPCR: rounding mode in bits 22-23 (00 = nearest), FZ bit 24, FZ16 bit 19.
constexpr uint64_t kModeMask = (uint64_t{3} << 22) | (uint64_t{1} << 24) | (uint64_t{1} << 19);
uint64_t read_bits() {
  uint64_t v;
  __asm__ volatile("mrs %0, fpcr" : "=r"(v));
  return v;
}
void write_bits(uint64_t v) { __asm__ volatile("msr fpcr, %0" : : "r"(v)); }
uint64_t profile_bits(uint64_t bits) { return bits & ~kModeMask; }
uint64_t fast_math_bits(uint64_t bits) { return bits | (uint64_t{1} << 24); }
#else
#error "lockstep sets the floating-point environment on x86 and AArch64 only"
#endif

}  // namespace

FloatEnvScope::FloatEnvScope() : saved_(read_bits()) {
  const uint64_t wanted = profile_bits(saved_);
  if (wanted != saved_) write_bits(wanted);
}

FloatEnvScope::~FloatEnvScope() {
  if (read_bits() != saved_) write_bits(saved_);
}

uint64_t float_env_bits() { return read_bits(); }
void float_env_set_fast_math_for_test() { write_bits(fast_math_bits(read_bits())); }
void float_env_restore_for_test(uint64_t bits) { write_bits(bits); }

}  // namespace lockstep
