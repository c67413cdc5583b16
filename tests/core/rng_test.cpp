#include <gtest/gtest.h>

#include "core/rng.hpp"

namespace lockstep {

TEST(Philox, MatchesPublishedKnownAnswers) {
  // Known-answer vectors of Philox4x32-10 from the Random123 distribution (kat_vectors).
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Rng, IsAPureFunctionOfItsKey) {
  EXPECT_EQ(random_u64(1, 2, 3), random_u64(1, 2, 3));
  EXPECT_NE(random_u64(1, 2, 3), random_u64(1, 2, 4));
  EXPECT_NE(random_u64(1, 2, 3), random_u64(1, 3, 3));
  EXPECT_NE(random_u64(1, 2, 3), random_u64(2, 2, 3));
}

TEST(Rng, BelowStaysInRangeAndCoversIt) {
  std::vector<int> seen(7, 0);
  for (uint64_t i = 0; i < 7000; ++i) {
    const uint64_t v = random_below(7, 9, 1, i);
    ASSERT_LT(v, 7u);
    ++seen[v];
  }
  for (int count : seen) EXPECT_GT(count, 800);
}

TEST(Rng, NormalHasUnitMoments) {
  double sum = 0, sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = random_normal(5, 0, static_cast<uint64_t>(i));
    sum += z;
    sq += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.01);
}

TEST(Rng, Open01NeverHitsTheEnds) {
  for (uint64_t i = 0; i < 10000; ++i) {
    const double u = random_open01(3, 4, i);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

}  // namespace lockstep
