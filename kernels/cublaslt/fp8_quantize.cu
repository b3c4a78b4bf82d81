// Per-tensor fp8 (e4m3) quantization on the device for the cuBLASLt fp8 variant: one pass finds
// amax, a second writes q = x / scale (scale = amax / 448, saturating) in K-major order with a
// 16-byte padded row, which is the only layout cuBLASLt's fp8 kernels accept ("TN").
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cublaslt/fp8_quantize.h"

namespace matserve::kernels {
namespace {

template <typename T>
__device__ __forceinline__ float as_float(T v) {
  return static_cast<float>(v);
}
template <>
__device__ __forceinline__ float as_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float as_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

// Logical R x K matrix X(r, p): k_major ? src[r * ld + p] : src[p * ld + r].
template <typename T>
__global__ void amax_kernel(const T* __restrict__ src, long long rows, long long cols, long long ld,
                            bool k_major, unsigned int* amax_bits) {
  const long long stored_rows = k_major ? rows : cols;
  const long long stored_cols = k_major ? cols : rows;
  float local = 0.0f;
  const long long total = stored_rows * stored_cols;
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long r = i / stored_cols, c = i % stored_cols;
    local = fmaxf(local, fabsf(as_float(src[r * ld + c])));
  }
  for (int off = 16; off > 0; off /= 2)
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, off));
  if (threadIdx.x % 32 == 0)
    atomicMax(amax_bits, __float_as_uint(local));  // non-negative floats order as uints
}

template <typename T>
__global__ void quantize_kernel(const T* __restrict__ src, long long rows, long long cols,
                                long long ld, bool k_major, const unsigned int* amax_bits,
                                __nv_fp8_e4m3* __restrict__ dst, long long ld_dst,
                                long long rows_dst, float* scale) {
  const float amax = __uint_as_float(*amax_bits);
  const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale = s;
  const float inv = 1.0f / s;
  for (long long r = blockIdx.y; r < rows_dst; r += gridDim.y) {
    for (long long p = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; p < ld_dst;
         p += static_cast<long long>(gridDim.x) * blockDim.x) {
      float v = 0.0f;
      if (p < cols && r < rows) v = as_float(k_major ? src[r * ld + p] : src[p * ld + r]) * inv;
      dst[r * ld_dst + p] = __nv_fp8_e4m3(v);  // satfinite: |v| <= 448 by construction
    }
  }
}

template <typename T>
cudaError_t run(const Fp8QuantizeArgs& a, cudaStream_t stream) {
  const T* src = static_cast<const T*>(a.src);
  amax_kernel<T><<<264, 256, 0, stream>>>(src, a.rows, a.cols, a.ld, a.k_major, a.amax_bits);
  const long long xblocks = (a.ld_dst + 255) / 256;
  const long long rows_dst = a.rows_dst > a.rows ? a.rows_dst : a.rows;
  const dim3 grid(static_cast<unsigned>(xblocks < 8 ? xblocks : 8),
                  static_cast<unsigned>(rows_dst < 65535 ? rows_dst : 65535));
  quantize_kernel<T><<<grid, 256, 0, stream>>>(src, a.rows, a.cols, a.ld, a.k_major, a.amax_bits,
                                               static_cast<__nv_fp8_e4m3*>(a.dst), a.ld_dst,
                                               rows_dst, a.scale);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fp8_quantize(const Fp8QuantizeArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  if (cudaError_t e = cudaMemsetAsync(a.amax_bits, 0, sizeof(unsigned int), stream);
      e != cudaSuccess) {
    return e;
  }
  switch (a.src_type) {
    case DType::kF32: return run<float>(a, stream);
    case DType::kF16: return run<__half>(a, stream);
    case DType::kBF16: return run<__nv_bfloat16>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace matserve::kernels
