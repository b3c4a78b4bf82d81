// Element types, layouts and compute modes shared by every kernel, backend and test.
// Plain C++ (no CUDA, no absl) so that .cu files, host code and tests can all include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace matserve::kernels {

// kF8E4M3: OCP fp8 e4m3 (4 exponent bits, 3 mantissa bits, max 448), for fp8 tensor-core GEMMs.
enum class DType : std::uint8_t { kF64, kF32, kF16, kBF16, kF8E4M3 };
enum class Layout : std::uint8_t { kRowMajor, kColMajor };

// What the multiply-adds are computed in. kDefault resolves per data type (see resolve_precision).
enum class Compute : std::uint8_t { kDefault, kF64, kF32, kTF32, kF16, kBF16, kF8 };

// A precision is the (data, compute) pair a variant implements, named as users say it.
enum class Precision : std::uint8_t {
  kF64,   // fp64 data, fp64 math
  kF32,   // fp32 data, IEEE fp32 math (no tensor cores)
  kTF32,  // fp32 data, tf32 tensor-core math, fp32 accumulate
  kF16,   // fp16 operands (given, or rounded from fp32 on the device), fp32 accumulate
  kBF16,  // bf16 operands (given, or rounded from fp32 on the device), fp32 accumulate
  kF8,    // e4m3 operands (given with scale 1, or quantized on the device with per-tensor
          // amax scales), fp32 accumulate
};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: return 8;
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kF8E4M3: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF64: return "fp64";
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
    case DType::kF8E4M3: return "fp8_e4m3";
  }
  return "?";
}

constexpr std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::kF64: return "fp64";
    case Precision::kF32: return "fp32";
    case Precision::kTF32: return "tf32";
    case Precision::kF16: return "fp16";
    case Precision::kBF16: return "bf16";
    case Precision::kF8: return "fp8";
  }
  return "?";
}

// Bit set of precisions, for registry entries.
using PrecisionSet = std::uint32_t;
constexpr PrecisionSet precision_bit(Precision p) {
  return 1u << static_cast<unsigned>(p);
}
// Every precision, in the order listings and tables use: the one list that loops over
// precisions iterate.
inline constexpr Precision kEveryPrecision[] = {Precision::kF64, Precision::kF32,  Precision::kTF32,
                                                Precision::kF16, Precision::kBF16, Precision::kF8};
// Every precision but fp8, which only the variants that implement it claim.
constexpr PrecisionSet kEveryPrecisionButF8 = [] {
  PrecisionSet s = 0;
  for (Precision p : kEveryPrecision) {
    if (p != Precision::kF8) s |= precision_bit(p);
  }
  return s;
}();

}  // namespace matserve::kernels
