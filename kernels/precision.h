// Which precision a (data type, compute mode) pair asks for, and which output types it may write.
// The one place these rules live: the service validates with it, backends and tests rely on it.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/types.h"

namespace matserve::kernels {

// fp64 -> fp64; fp32 -> fp32 | tf32 | fp16 | bf16 (the last two round on the device);
// fp16 -> fp16; bf16 -> bf16 (both accumulate in fp32). Anything else is InvalidArgument.
absl::StatusOr<Precision> resolve_precision(DType data, Compute compute);

// fp64 and fp32 data write their own type; fp16 and bf16 data write their own type or fp32.
absl::Status check_output_dtype(DType data, DType out);

// The operand type a kernel receives: fp32 data computed as fp16/bf16 is converted first.
DType kernel_operand_dtype(DType data, Precision p);

}  // namespace matserve::kernels
