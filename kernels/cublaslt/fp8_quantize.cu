// fp8 (e4m3) operands for the cuBLASLt fp8 variant, packed on the device into the only layout
// cuBLASLt's fp8 kernels accept ("TN": K-major, rows padded to 16 bytes). fp32/fp16/bf16 data is
// quantized per tensor: one pass finds amax, a second writes q = x / scale (scale = amax / 448,
// saturating). e4m3 data in another layout is repacked bit for bit (scale 1).
//
// The packing pass goes through a 32 x 32 tile in shared memory, so both the read (along the
// stored rows, whichever way the operand is stored) and the write (along K) are coalesced; a
// plain per-element loop reads a column-stored operand with a stride of ld elements per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cublaslt/fp8_quantize.h"

namespace matserve::kernels {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // threads per block: kTile x kRowsPerPass

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

// One element as the packed operand holds it: quantized with 1 / scale, or an e4m3 byte as is.
template <typename T>
struct Quantized {
  float inv;
  __device__ __forceinline__ unsigned char operator()(T v) const {
    const __nv_fp8_e4m3 q(as_float(v) * inv);  // satfinite: |v| <= 448 by construction
    return q.__x;
  }
};
struct AsIs {
  __device__ __forceinline__ unsigned char operator()(unsigned char v) const { return v; }
};

// dst (rows_dst x ld_dst, K-major) from X, 0 outside rows x cols. Block (kTile, kRowsPerPass)
// covers the tile of dst rows [r0, r0 + kTile), columns [p0, p0 + kTile). Grid y walks tiles of
// rows beyond 65535 blocks by striding.
template <typename T, typename Convert>
__device__ __forceinline__ void pack_tiles(const T* __restrict__ src, long long rows,
                                           long long cols, long long ld, bool k_major,
                                           unsigned char* __restrict__ dst, long long ld_dst,
                                           long long rows_dst, Convert convert) {
  __shared__ unsigned char tile[kTile][kTile + 4];
  const long long p0 = static_cast<long long>(blockIdx.x) * kTile;
  for (long long r0 = static_cast<long long>(blockIdx.y) * kTile; r0 < rows_dst;
       r0 += static_cast<long long>(gridDim.y) * kTile) {
    // Read along the stored rows: K-major X along p, column-stored X along r.
    for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
      const int i = threadIdx.x;
      const long long r = k_major ? r0 + j : r0 + i;
      const long long p = k_major ? p0 + i : p0 + j;
      unsigned char q = 0;
      if (r < rows && p < cols) q = convert(k_major ? src[r * ld + p] : src[p * ld + r]);
      if (k_major) {
        tile[j][i] = q;
      } else {
        tile[i][j] = q;
      }
    }
    __syncthreads();
    // Write along K.
    for (int j = threadIdx.y; j < kTile; j += kRowsPerPass) {
      const long long r = r0 + j;
      const long long p = p0 + threadIdx.x;
      if (r < rows_dst && p < ld_dst) dst[r * ld_dst + p] = tile[j][threadIdx.x];
    }
    __syncthreads();
  }
}

// The dequant scale of a tensor whose largest magnitude is amax: it maps amax to e4m3's largest
// finite value, 448 (1 for an all-zero tensor).
__device__ __forceinline__ float dequant_scale(const unsigned int* amax_bits) {
  const float amax = __uint_as_float(*amax_bits);
  return amax > 0.0f ? amax / 448.0f : 1.0f;
}

__global__ void write_scale(const unsigned int* amax_bits, float* scale) {
  *scale = dequant_scale(amax_bits);
}

template <typename T>
__global__ void pack_quantized_kernel(const T* __restrict__ src, long long rows, long long cols,
                                      long long ld, bool k_major, const unsigned int* amax_bits,
                                      unsigned char* __restrict__ dst, long long ld_dst,
                                      long long rows_dst) {
  const float inv = 1.0f / dequant_scale(amax_bits);
  pack_tiles<T, Quantized<T>>(src, rows, cols, ld, k_major, dst, ld_dst, rows_dst,
                              Quantized<T>{inv});
}

__global__ void pack_as_is_kernel(const unsigned char* __restrict__ src, long long rows,
                                  long long cols, long long ld, bool k_major,
                                  unsigned char* __restrict__ dst, long long ld_dst,
                                  long long rows_dst) {
  pack_tiles<unsigned char, AsIs>(src, rows, cols, ld, k_major, dst, ld_dst, rows_dst, AsIs{});
}

dim3 pack_grid(const Fp8QuantizeArgs& a, long long rows_dst) {
  const long long x = (a.ld_dst + kTile - 1) / kTile;
  const long long y = (rows_dst + kTile - 1) / kTile;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y < 65535 ? y : 65535));
}

template <typename T>
cudaError_t quantize(const Fp8QuantizeArgs& a, long long rows_dst, cudaStream_t stream) {
  const T* src = static_cast<const T*>(a.src);
  amax_kernel<T><<<264, 256, 0, stream>>>(src, a.rows, a.cols, a.ld, a.k_major, a.amax_bits);
  write_scale<<<1, 1, 0, stream>>>(a.amax_bits, a.scale);
  pack_quantized_kernel<T><<<pack_grid(a, rows_dst), dim3(kTile, kRowsPerPass), 0, stream>>>(
      src, a.rows, a.cols, a.ld, a.k_major, a.amax_bits, static_cast<unsigned char*>(a.dst),
      a.ld_dst, rows_dst);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fp8_quantize(const Fp8QuantizeArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const long long rows_dst = a.rows_dst > a.rows ? a.rows_dst : a.rows;
  if (a.src_type == DType::kF8E4M3) {
    pack_as_is_kernel<<<pack_grid(a, rows_dst), dim3(kTile, kRowsPerPass), 0, stream>>>(
        static_cast<const unsigned char*>(a.src), a.rows, a.cols, a.ld, a.k_major,
        static_cast<unsigned char*>(a.dst), a.ld_dst, rows_dst);
    return cudaGetLastError();
  }
  if (cudaError_t e = cudaMemsetAsync(a.amax_bits, 0, sizeof(unsigned int), stream);
      e != cudaSuccess) {
    return e;
  }
  switch (a.src_type) {
    case DType::kF32: return quantize<float>(a, rows_dst, stream);
    case DType::kF16: return quantize<__half>(a, rows_dst, stream);
    case DType::kBF16: return quantize<__nv_bfloat16>(a, rows_dst, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace matserve::kernels
