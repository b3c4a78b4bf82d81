// Ampere-style (sm_80+) warp-level tensor-core PTX as named device functions: ldmatrix fragment
// loads from shared memory and the mma.sync instructions the mma_sync (fp16/bf16 m16n8k16) and
// DMMA (fp64 m16n8k4) GEMMs issue. Each name says the shape and types as PTX does; fragment
// layouts are PTX's (see each function). Bodies are compiled for __CUDA_ARCH__ >= 800 only.
#pragma once

#include <cstdint>

#include "kernels/cuda/async_copy.cuh"

namespace matserve::kernels::mma_sm80 {

// Four 8x8 b16 matrices from shared memory: lane l supplies the address of row l % 8 of matrix
// l / 8, and receives in r[i] its two elements of matrix i (row l / 4, columns 2 * (l % 4) + 0..1).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(async_copy::smem_u32(p)));
#endif
}

// The same, each matrix transposed on the way (rows supplied are its columns).
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(async_copy::smem_u32(p)));
#endif
}

// D (16x8, fp32) += A (16x16, row) * B (16x8, col), fp16 operands: a[] as ldmatrix_x4 loads a
// 16x16 tile, b0/b1 the two k-halves of B's 8 columns.
__device__ __forceinline__ void mma_m16n8k16_f32_f16(float (&d)[4], const std::uint32_t (&a)[4],
                                                     std::uint32_t b0, std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// The same with bf16 operands.
__device__ __forceinline__ void mma_m16n8k16_f32_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                                      std::uint32_t b0, std::uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

// D (16x8) += A (16x4, row) * B (4x8, col), all fp64. Lane (g = lane / 4, t = lane % 4) holds
// A(g, t) in a0, A(g + 8, t) in a1, B(t, g) in b, and D(g, 2t..2t+1), D(g + 8, 2t..2t+1) in d.
__device__ __forceinline__ void mma_m16n8k4_f64(double (&d)[4], double a0, double a1, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a0), "d"(a1), "d"(b));
#endif
}

}  // namespace matserve::kernels::mma_sm80
