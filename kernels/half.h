// Host-side conversions between float and the 16-bit formats (IEEE fp16, bfloat16), round to
// nearest even, plus tf32 rounding. Used by the CPU backend, the float64 reference and the tests;
// the GPU uses the CUDA intrinsics instead.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace matserve::kernels {

inline std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<std::uint16_t>(u >> 16);
}

inline float bf16_to_float(std::uint16_t h) {
  return bits_float(static_cast<std::uint32_t>(h) << 16);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f;
  const std::uint32_t man = h & 0x3ff;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000 | (man << 13));  // inf / nan
  if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
  if (man == 0) return bits_float(sign);  // signed zero
  // Subnormal: value = man * 2^-24.
  const float v = std::ldexp(static_cast<float>(man), -24);
  return sign ? -v : v;
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | 0x7e00);
  if (a >= 65520.0f) return static_cast<std::uint16_t>(sign | 0x7c00);  // rounds to inf
  if (a < 6.103515625e-05f) {
    // Subnormal range: quantum 2^-24; nearbyint rounds half to even in the default mode.
    const auto q = static_cast<std::uint16_t>(std::nearbyint(std::ldexp(a, 24)));
    return static_cast<std::uint16_t>(sign | q);
  }
  std::uint32_t bits = float_bits(a);
  bits += 0xfff + ((bits >> 13) & 1);  // round mantissa to 10 bits, half to even
  const std::uint32_t exp = ((bits >> 23) & 0xff) - 112;
  return static_cast<std::uint16_t>(sign | (exp << 10) | ((bits >> 13) & 0x3ff));
}

// OCP fp8 e4m3: bias 7, no infinities, 0x7f/0xff are NaN, max finite 448, subnormal quantum 2^-9.
inline float e4m3_to_float(std::uint8_t b) {
  const float sign = (b & 0x80) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(man), -9);
  return sign * std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
}

// Round to nearest even, saturating to +-448 (as the device's satfinite conversion does).
inline std::uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return static_cast<std::uint8_t>(sign | 0x7e);
  if (a < 0.015625f) {  // subnormal range: quantum 2^-9
    const auto q = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
    return static_cast<std::uint8_t>(sign | q);  // q == 8 encodes the smallest normal
  }
  int e = 0;
  const float fr = std::frexp(a, &e);  // a = fr * 2^e, fr in [0.5, 1)
  int man = static_cast<int>(std::nearbyint((fr * 2.0f - 1.0f) * 8.0f));
  int exp = e - 1 + 7;
  if (man == 8) {
    man = 0;
    ++exp;
  }
  return static_cast<std::uint8_t>(sign | (exp << 3) | man);
}

// tf32 keeps fp32's exponent and 10 mantissa bits; round to nearest even as the tensor cores'
// conversion (cvt.rna rounds ties away; the difference is below the tolerance of any test).
inline float round_to_tf32(float f) {
  if (!std::isfinite(f)) return f;
  std::uint32_t u = float_bits(f);
  u += 0xfff + ((u >> 13) & 1);
  return bits_float(u & 0xffffe000u);
}

}  // namespace matserve::kernels
