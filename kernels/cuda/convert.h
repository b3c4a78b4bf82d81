// Element-type conversion on the device (fp32 -> fp16/bf16 and back), used when fp32 data is
// computed in a 16-bit precision. Plain header: no absl, so .cu files and host code can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/types.h"

namespace matserve::kernels {

// dst[i] = (dst_type) src[i] for i < count, round to nearest even.
cudaError_t launch_convert(const void* src, DType src_type, void* dst, DType dst_type,
                           std::int64_t count, cudaStream_t stream);

}  // namespace matserve::kernels
