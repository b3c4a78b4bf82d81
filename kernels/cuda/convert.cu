// Element-type conversion on the device: a grid-stride loop, one element per thread per step.
// Memory-bound and run once per operand, so nothing more elaborate is worth it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/convert.h"

namespace matserve::kernels {
namespace {

template <typename T>
__device__ float to_float(T v);
template <>
__device__ float to_float<float>(float v) {
  return v;
}
template <>
__device__ float to_float<double>(double v) {
  return static_cast<float>(v);
}
template <>
__device__ float to_float<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ float to_float<__nv_fp8_e4m3>(__nv_fp8_e4m3 v) {
  return static_cast<float>(v);
}

template <typename T>
__device__ T from_float(float v);
template <>
__device__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ double from_float<double>(float v) {
  return v;
}
template <>
__device__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float v) {
  return __nv_fp8_e4m3(v);
}  // satfinite

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, std::int64_t count) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = from_float<D>(to_float(src[i]));
  }
}

template <typename S, typename D>
cudaError_t run(const void* src, void* dst, std::int64_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const std::int64_t blocks = (count + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  convert_kernel<S, D>
      <<<grid, kThreads, 0, stream>>>(static_cast<const S*>(src), static_cast<D*>(dst), count);
  return cudaGetLastError();
}

template <typename S>
cudaError_t run_to(const void* src, void* dst, DType dst_type, std::int64_t count,
                   cudaStream_t stream) {
  switch (dst_type) {
    case DType::kF32: return run<S, float>(src, dst, count, stream);
    case DType::kF16: return run<S, __half>(src, dst, count, stream);
    case DType::kBF16: return run<S, __nv_bfloat16>(src, dst, count, stream);
    case DType::kF64: return run<S, double>(src, dst, count, stream);
    case DType::kF8E4M3: return run<S, __nv_fp8_e4m3>(src, dst, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch_convert(const void* src, DType src_type, void* dst, DType dst_type,
                           std::int64_t count, cudaStream_t stream) {
  switch (src_type) {
    case DType::kF32: return run_to<float>(src, dst, dst_type, count, stream);
    case DType::kF16: return run_to<__half>(src, dst, dst_type, count, stream);
    case DType::kBF16: return run_to<__nv_bfloat16>(src, dst, dst_type, count, stream);
    case DType::kF64: return run_to<double>(src, dst, dst_type, count, stream);
    case DType::kF8E4M3: return run_to<__nv_fp8_e4m3>(src, dst, dst_type, count, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace matserve::kernels
