// A probe that tells the compute precisions apart: fp32 values whose rounding differs per format,
// with each format's rounded value written out by hand (not computed by the code under test).
// Multiplied by 1 (a probe x 1 column times a 1 x 1 B = [1]), the product is the rounded value.
#pragma once

#include <array>
#include <cmath>

#include "kernels/types.h"

namespace matserve::testing {

struct ProbeValue {
  float in;                // fp32 data, exact
  float tf32, fp16, bf16;  // the value each format rounds it to (round to nearest, ties to even)
};

// 1+2^-9: exact in tf32 and fp16 (10 fraction bits), 1 in bf16 (7 bits).
// 1+2^-12: exact only in fp32.
// 2^-20 (1+2^-9): tf32 keeps fp32's range; in fp16 it is subnormal (spacing 2^-24): 2^-20.
// 1+3*2^-11: one and a half fp16/tf32 steps, a tie: to even, 1+2^-9 (truncation gives 1+2^-10).
// 1+3*2^-8: exact in fp16 and tf32; one and a half bf16 steps, a tie: to even, 1+2^-6.
inline const std::array<ProbeValue, 5>& precision_probe() {
  static const std::array<ProbeValue, 5> probe = {{
      {1.0f + 0x1p-9f, 1.0f + 0x1p-9f, 1.0f + 0x1p-9f, 1.0f},
      {1.0f + 0x1p-12f, 1.0f, 1.0f, 1.0f},
      {0x1p-20f * (1.0f + 0x1p-9f), 0x1p-20f * (1.0f + 0x1p-9f), 0x1p-20f, 0x1p-20f},
      {1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-9f, 1.0f + 0x1p-9f, 1.0f},
      {1.0f + 3 * 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},
  }};
  return probe;
}

// The value `v` becomes when computed in `p` (fp32 and fp64 keep it).
inline float probe_expected(const ProbeValue& v, kernels::Precision p) {
  switch (p) {
    case kernels::Precision::kTF32: return v.tf32;
    case kernels::Precision::kF16: return v.fp16;
    case kernels::Precision::kBF16: return v.bf16;
    default: return v.in;
  }
}

}  // namespace matserve::testing
