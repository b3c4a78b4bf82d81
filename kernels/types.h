// Element types, layouts and compute modes shared by every kernel, backend and test.
// Plain C++ (no CUDA, no absl) so that .cu files, host code and tests can all include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace matserve::kernels {

enum class DType : std::uint8_t { kF64, kF32, kF16, kBF16 };
enum class Layout : std::uint8_t { kRowMajor, kColMajor };

// What the multiply-adds are computed in. kDefault resolves per data type (see resolve_precision).
enum class Compute : std::uint8_t { kDefault, kF64, kF32, kTF32, kF16, kBF16 };

// A precision is the (data, compute) pair a variant implements, named as users say it.
enum class Precision : std::uint8_t {
  kF64,   // fp64 data, fp64 math
  kF32,   // fp32 data, IEEE fp32 math (no tensor cores)
  kTF32,  // fp32 data, tf32 tensor-core math, fp32 accumulate
  kF16,   // fp16 operands (given, or rounded from fp32 on the device), fp32 accumulate
  kBF16,  // bf16 operands (given, or rounded from fp32 on the device), fp32 accumulate
};

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64: return 8;
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF64: return "fp64";
    case DType::kF32: return "fp32";
    case DType::kF16: return "fp16";
    case DType::kBF16: return "bf16";
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
  }
  return "?";
}

// Bit set of precisions, for registry entries.
using PrecisionSet = std::uint32_t;
constexpr PrecisionSet precision_bit(Precision p) { return 1u << static_cast<unsigned>(p); }
constexpr PrecisionSet kAllPrecisions = 0x1f;

}  // namespace matserve::kernels
