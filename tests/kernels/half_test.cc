// Host fp16/bf16/tf32 conversions: exact values, rounding to nearest even, specials.
#include "kernels/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace matserve::kernels {
namespace {

TEST(Half, RoundTripsEveryFiniteHalf) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = half_to_float(bits);
    if (std::isnan(f)) continue;
    EXPECT_EQ(float_to_half(f), bits) << std::hex << h;
  }
}

TEST(Half, KnownValuesAndRounding) {
  EXPECT_EQ(float_to_half(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(1e6f), 0x7c00);                // overflow -> inf
  EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), 0x3c00);  // tie rounds to even
  EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);  // tie rounds to even (up)
  EXPECT_EQ(float_to_half(5.9604645e-08f), 0x0001);      // smallest subnormal
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(BFloat16, KnownValuesAndRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(float_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // tie to even
  EXPECT_EQ(float_to_bf16(1.0f + 3.0f / 256), 0x3f82);  // tie to even (up)
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
}

TEST(Tf32, KeepsTenMantissaBits) {
  EXPECT_EQ(round_to_tf32(1.0f), 1.0f);
  EXPECT_EQ(round_to_tf32(1.0f + 1.0f / 4096), 1.0f);
  EXPECT_EQ(round_to_tf32(1.0f + 3.0f / 2048), 1.0f + 2.0f / 1024);
}

}  // namespace
}  // namespace matserve::kernels
