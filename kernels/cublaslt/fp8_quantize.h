// Device-side per-tensor fp8 e4m3 quantization (amax scale), or repacking of e4m3 data, into the
// K-major layout the fp8 GEMMs (cuBLASLt's and wgmma_fp8) read. Plain header (no absl) so the .cu
// and the variant's .cc share it.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/types.h"

namespace matserve::kernels {

// Packs the logical rows x cols matrix X (X(r, p) = k_major ? src[r*ld + p] : src[p*ld + r]) into
// dst[r * ld_dst + p] for r < rows_dst (e4m3, ld_dst >= cols, rows_dst >= rows; padding rows and
// columns written as 0). fp32/fp16/bf16 data is quantized: the dequant scale amax / 448 (1 when
// amax == 0) goes to *scale, amax_bits is scratch for one uint. e4m3 data is copied bit for bit
// (scale 1; amax_bits and scale unused).
struct Fp8QuantizeArgs {
  const void* src = nullptr;
  DType src_type = DType::kF32;
  long long rows = 0, cols = 0, ld = 0;
  bool k_major = true;
  void* dst = nullptr;
  long long ld_dst = 0;
  long long rows_dst = 0;  // 0: same as rows
  unsigned int* amax_bits = nullptr;
  float* scale = nullptr;
};

cudaError_t launch_fp8_quantize(const Fp8QuantizeArgs& a, cudaStream_t stream);

}  // namespace matserve::kernels
