// The fp64 rates of the CUDA cores that bound a CUDA-core DGEMM, measured by three kernels that do
// no global memory work (fp64_peak prints them beside cuBLAS DGEMM and the ladder's variants):
//   constant_bank - independent DFMAs whose two other operands are kernel parameters, read from
//                   the constant bank: the datasheet rate (64 fp64 lanes per SM per cycle);
//   registers     - the same DFMAs with every operand in registers, as a GEMM's are;
//   inner_loop    - simt_tuned's fp64 inner loop alone: 128x128 block tile, 8 warps, 8x8 doubles
//                   per lane, fragments read from shared memory as LDS.128 (double-buffered in
//                   registers), one barrier per 8-step k-tile; no global loads, no epilogue.
// The last one is the ceiling of that kernel design: a GEMM built on it adds global-to-shared
// copies, the epilogue, partial waves and the clock drop of minutes of load.
#pragma once

#include <cuda_runtime_api.h>

namespace matserve::bench {

struct Fp64Ceilings {
  double constant_bank_tflops = 0;
  double registers_tflops = 0;
  double inner_loop_tflops = 0;
};

// Medians of `reps` timed launches after `warmup`, CUDA events on `stream`; false when a launch
// or an allocation failed.
bool measure_fp64_ceilings(cudaStream_t stream, int warmup, int reps, Fp64Ceilings* out);

}  // namespace matserve::bench
