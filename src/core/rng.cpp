#include "core/rng.hpp"

#include "core/host_math.hpp"

namespace lockstep {

PhiloxBlock philox4x32(PhiloxBlock c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

PhiloxBlock random_block(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock counter = {static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                               static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return philox4x32(counter, {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

uint64_t random_u64(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = random_block(seed, stream, index);
  return (static_cast<uint64_t>(b[1]) << 32) | b[0];
}

uint64_t random_below(uint64_t n, uint64_t seed, uint64_t stream, uint64_t index) {
  if (n <= 1) return 0;
  // A rejected draw moves to index + k * 2^40 of the same stream; 2^-64 per retry is negligible,
  // but the loop keeps the result exact.
  const uint64_t threshold = (0 - n) % n;
  for (uint64_t attempt = 0;; ++attempt) {
    const uint64_t x = random_u64(seed, stream, index + (attempt << 40));
    const unsigned __int128 m = static_cast<unsigned __int128>(x) * n;
    if (static_cast<uint64_t>(m) >= threshold) return static_cast<uint64_t>(m >> 64);
  }
}

static double open01_from(uint32_t lo, uint32_t hi) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;  // 53 bits
  return (static_cast<double>(bits) + 0.5) * 0x1p-53;
}

double random_open01(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = random_block(seed, stream, index);
  return open01_from(b[0], b[1]);
}

double random_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const PhiloxBlock b = random_block(seed, stream, index);
  const double u1 = open01_from(b[0], b[1]);
  const double u2 = open01_from(b[2], b[3]);
  const double r = host_sqrt(-2.0 * host_log(u1));
  return r * host_cos(2.0 * kHostPi * u2);
}

}  // namespace lockstep
