// Precision rules: see precision.h.
#include "kernels/precision.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace matserve::kernels {
namespace {

std::string_view compute_name(Compute c) {
  switch (c) {
    case Compute::kDefault: return "default";
    case Compute::kF64: return "fp64";
    case Compute::kF32: return "fp32";
    case Compute::kTF32: return "tf32";
    case Compute::kF16: return "fp16";
    case Compute::kBF16: return "bf16";
    case Compute::kF8: return "fp8";
  }
  return "?";
}

}  // namespace

absl::StatusOr<Precision> resolve_precision(DType data, Compute compute) {
  switch (data) {
    case DType::kF64:
      if (compute == Compute::kDefault || compute == Compute::kF64) return Precision::kF64;
      break;
    case DType::kF32:
      switch (compute) {
        case Compute::kDefault:
        case Compute::kF32: return Precision::kF32;
        case Compute::kTF32: return Precision::kTF32;
        case Compute::kF16: return Precision::kF16;
        case Compute::kBF16: return Precision::kBF16;
        case Compute::kF8: return Precision::kF8;
        case Compute::kF64: break;
      }
      break;
    case DType::kF16:
      if (compute == Compute::kDefault || compute == Compute::kF16 || compute == Compute::kF32) {
        return Precision::kF16;
      }
      if (compute == Compute::kF8) return Precision::kF8;
      break;
    case DType::kBF16:
      if (compute == Compute::kDefault || compute == Compute::kBF16 || compute == Compute::kF32) {
        return Precision::kBF16;
      }
      if (compute == Compute::kF8) return Precision::kF8;
      break;
    case DType::kF8E4M3:
      if (compute == Compute::kDefault || compute == Compute::kF8 || compute == Compute::kF32) {
        return Precision::kF8;
      }
      break;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("compute: mode '", std::string(compute_name(compute)), "' is not available for ",
                   std::string(dtype_name(data)),
                   " data (fp64: fp64; fp32: fp32, tf32, fp16, bf16; fp16: fp16 or fp32 "
                   "accumulate; bf16: bf16 or fp32 accumulate)"));
}

absl::Status check_output_dtype(DType data, DType out) {
  if (out == data) return absl::OkStatus();
  if ((data == DType::kF16 || data == DType::kBF16) && out == DType::kF32) return absl::OkStatus();
  if (data == DType::kF8E4M3 && (out == DType::kBF16 || out == DType::kF16 || out == DType::kF32))
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("output_dtype: ", std::string(dtype_name(out)), " output is not available for ",
                   std::string(dtype_name(data)), " inputs (fp16/bf16 inputs may write fp32)"));
}

DType kernel_operand_dtype(DType data, Precision p) {
  if (data == DType::kF32 && p == Precision::kF16) return DType::kF16;
  if (data == DType::kF32 && p == Precision::kBF16) return DType::kBF16;
  return data;
}

}  // namespace matserve::kernels
