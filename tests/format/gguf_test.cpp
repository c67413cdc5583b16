// The f16 conversions behind GGUF export and Hugging Face import (format/half.hpp), exhaustively:
// every binary16 widens exactly and narrows back to itself; every midpoint between neighbours
// rounds to the even one; past 65520 is infinity; and the Q8_0 block layout on hand-made values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "format/gguf.hpp"
#include "format/half.hpp"

namespace lockstep::format {
namespace {

TEST(Half, EveryF16WidensExactlyAndNarrowsBack) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f32_from_f16_bits(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f16_bits_from_f32(f), h) << std::hex << h;
  }
  EXPECT_EQ(f32_from_f16_bits(0x3c00), 1.0f);
  EXPECT_EQ(f32_from_f16_bits(0x0001), std::ldexp(1.0f, -24));  // the smallest subnormal
  EXPECT_EQ(f32_from_f16_bits(0x7bff), 65504.0f);
  EXPECT_EQ(f32_from_bf16_bits(0x3f80), 1.0f);
}

TEST(Half, MidpointsRoundToEvenAndOverflowIsInfinity) {
  for (uint32_t h = 0; h < 0x7bff; ++h) {  // positive finite neighbours (h, h + 1)
    const double lo = f32_from_f16_bits(static_cast<uint16_t>(h));
    const double hi = f32_from_f16_bits(static_cast<uint16_t>(h + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in f32: one more bit than f16
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    EXPECT_EQ(f16_bits_from_f32(mid), (h & 1) ? h + 1 : h) << std::hex << h;
    EXPECT_EQ(f16_bits_from_f32(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    EXPECT_EQ(f16_bits_from_f32(std::nextafter(mid, 1e9f)), h + 1) << std::hex << h;
    EXPECT_EQ(f16_bits_from_f32(-mid), ((h & 1) ? h + 1 : h) | 0x8000u);
  }
  EXPECT_EQ(f16_bits_from_f32(65519.996f), 0x7bff);
  EXPECT_EQ(f16_bits_from_f32(65520.0f), 0x7c00);
  EXPECT_EQ(f16_bits_from_f32(std::ldexp(1.0f, -25)), 0);  // the tie below the smallest subnormal: even, 0
  EXPECT_EQ(f16_bits_from_f32(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 1);
}

TEST(Q8_0, BlockLayout) {
  std::vector<float> row(64, 0.0f);
  row[0] = 127.0f, row[1] = -0.5f, row[2] = 0.5f, row[3] = 63.5f;  // d = 1: halves away from zero
  row[32 + 5] = -2.54f;                                            // second block: d = 0.02
  std::vector<uint8_t> out;
  append_q8_0_row(row, out, "t");
  ASSERT_EQ(out.size(), 68u);
  EXPECT_EQ(out[0] | (out[1] << 8), 0x3c00);  // f16(1.0)
  EXPECT_EQ(static_cast<int8_t>(out[2]), 127);
  EXPECT_EQ(static_cast<int8_t>(out[3]), -1);
  EXPECT_EQ(static_cast<int8_t>(out[4]), 1);
  EXPECT_EQ(static_cast<int8_t>(out[5]), 64);
  EXPECT_EQ(static_cast<int8_t>(out[34 + 2 + 5]), -127);
  EXPECT_EQ(out[34] | (out[35] << 8), f16_bits_from_f32(2.54f / 127.0f));
  std::vector<float> zeros(32, 0.0f);
  out.clear();
  append_q8_0_row(zeros, out, "t");
  EXPECT_EQ(out, std::vector<uint8_t>(34, 0));
}

}  // namespace
}  // namespace lockstep::format
