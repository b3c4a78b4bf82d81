// fp8 (e4m3) operands for every fp8 variant (cuBLASLt's and wgmma_fp8), packed on the device
// into the layout fp8 tensor cores read ("TN": K-major, rows padded to 16 bytes). fp32/fp16/bf16
// data is quantized per tensor: one pass finds amax, a second writes q = x / scale (scale = amax /
// 448, saturating). e4m3 data in another layout is repacked bit for bit (scale 1).
//
// Repacking column-stored e4m3 data moves 16 bytes a thread each way through a 64 x 64-byte tile.
// Both quantize passes read the stored rows 16 bytes per thread where the rows are 16-byte aligned
// (amax: one warp-and-block reduction and one atomic per block; quantizing K-major data: 8 elements
// in, 8 bytes out per thread, the first thread also writing the scale, which takes no launch of its
// own), so they run near copy bandwidth. Quantizing a column-stored operand
// (and repacking one whose K-major rows are not 16-byte aligned) goes through a 32 x 32 tile in
// shared memory, so both the read (along the stored rows) and the write (along K) are coalesced;
// a plain per-element loop would read it with a stride of ld elements per thread.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

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

constexpr int kRowThreads = 256;
constexpr int kPerThread = 8;  // elements per thread in the row passes

// The grid of a row pass over a stored rows x cols matrix: x covers a row kRowThreads *
// kPerThread elements per block, y walks the rows (each block row strides by gridDim.y), with
// enough blocks in all to fill the GPU several times over.
dim3 row_grid(long long rows, long long cols) {
  long long x = (cols + kRowThreads * kPerThread - 1) / (kRowThreads * kPerThread);
  if (x < 1) x = 1;
  long long y = (8192 + x - 1) / x;
  if (y > rows) y = rows;
  if (y > 65535) y = 65535;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y < 1 ? 1 : y));
}

// kPerThread consecutive elements of a row from `at` into v[] (as float): one or two 16-byte
// loads when kVector (16-byte aligned, all in range), else one by one up to `left`.
template <typename T, bool kVector>
__device__ __forceinline__ void load_run(const T* at, long long left, float (&v)[kPerThread]) {
  if (kVector && left >= kPerThread) {
    constexpr int kLoads = kPerThread * static_cast<int>(sizeof(T)) / 16;
    uint4 raw[kLoads > 0 ? kLoads : 1];
#pragma unroll
    for (int l = 0; l < kLoads; ++l) raw[l] = __ldg(reinterpret_cast<const uint4*>(at) + l);
    const T* e = reinterpret_cast<const T*>(raw);
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) v[i] = as_float(e[i]);
    return;
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) v[i] = i < left ? as_float(at[i]) : 0.0f;
}

// The largest magnitude of the stored rows x cols matrix (leading dimension ld) into *amax_bits
// (atomicMax on the bits: non-negative floats order as unsigned integers).
template <typename T, bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    amax_kernel(const T* __restrict__ src, long long rows, long long cols, long long ld,
                unsigned int* amax_bits) {
  float local = 0.0f;
  const long long step = static_cast<long long>(gridDim.x) * kRowThreads * kPerThread;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    for (long long c =
             (static_cast<long long>(blockIdx.x) * kRowThreads + threadIdx.x) * kPerThread;
         c < cols; c += step) {
      float v[kPerThread];
      load_run<T, kVector>(src + r * ld + c, cols - c, v);
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) local = fmaxf(local, fabsf(v[i]));
    }
  }
  for (int off = 16; off > 0; off /= 2)
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, off));
  __shared__ float warp_max[kRowThreads / 32];
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = 0.0f;
#pragma unroll
    for (int w = 0; w < kRowThreads / 32; ++w) m = fmaxf(m, warp_max[w]);
    atomicMax(amax_bits, __float_as_uint(m));
  }
}

// One element as the packed operand holds it: quantized with 1 / scale, or an e4m3 byte as is.
template <typename T>
struct Quantized {
  float inv;
  __device__ __forceinline__ unsigned char from_float(float v) const {
    const __nv_fp8_e4m3 q(v * inv);  // satfinite: |v| <= 448 by construction
    return q.__x;
  }
  __device__ __forceinline__ unsigned char operator()(T v) const { return from_float(as_float(v)); }
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

// The quantize kernels' first thread also states the scale (no launch of its own for it).
__device__ __forceinline__ void state_scale(const unsigned int* amax_bits, float* scale) {
  if (scale != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0 &&
      threadIdx.y == 0) {
    *scale = dequant_scale(amax_bits);
  }
}

template <typename T>
__global__ void pack_quantized_kernel(const T* __restrict__ src, long long rows, long long cols,
                                      long long ld, bool k_major, const unsigned int* amax_bits,
                                      float* scale, unsigned char* __restrict__ dst,
                                      long long ld_dst, long long rows_dst) {
  state_scale(amax_bits, scale);
  const float inv = 1.0f / dequant_scale(amax_bits);
  pack_tiles<T, Quantized<T>>(src, rows, cols, ld, k_major, dst, ld_dst, rows_dst,
                              Quantized<T>{inv});
}

// K-major X straight into dst (rows_dst x ld_dst), quantized with 1 / scale, 0 outside rows x
// cols: kPerThread elements in, kPerThread bytes (one 8-byte store) out per thread.
template <typename T, bool kVector>
__global__ void __launch_bounds__(kRowThreads)
    quantize_rows_kernel(const T* __restrict__ src, long long rows, long long cols, long long ld,
                         const unsigned int* amax_bits, float* scale,
                         unsigned char* __restrict__ dst, long long ld_dst, long long rows_dst) {
  state_scale(amax_bits, scale);
  const Quantized<T> convert{1.0f / dequant_scale(amax_bits)};
  const long long step = static_cast<long long>(gridDim.x) * kRowThreads * kPerThread;
  for (long long r = blockIdx.y; r < rows_dst; r += gridDim.y) {
    for (long long c =
             (static_cast<long long>(blockIdx.x) * kRowThreads + threadIdx.x) * kPerThread;
         c < ld_dst; c += step) {
      float v[kPerThread];
      if (r < rows) {
        load_run<T, kVector>(src + r * ld + c, cols - c, v);
      } else {
#pragma unroll
        for (int i = 0; i < kPerThread; ++i) v[i] = 0.0f;
      }
      unsigned char q[kPerThread];
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) q[i] = convert.from_float(v[i]);
      *reinterpret_cast<uint2*>(dst + r * ld_dst + c) = *reinterpret_cast<const uint2*>(q);
    }
  }
}

__global__ void pack_as_is_kernel(const unsigned char* __restrict__ src, long long rows,
                                  long long cols, long long ld, bool k_major,
                                  unsigned char* __restrict__ dst, long long ld_dst,
                                  long long rows_dst) {
  pack_tiles<unsigned char, AsIs>(src, rows, cols, ld, k_major, dst, ld_dst, rows_dst, AsIs{});
}

// Column-stored e4m3 X (X(r, p) = src[p * ld + r]) into K-major dst, bit for bit, through a
// 64 x 64-byte tile: each thread reads 16 bytes along a stored row (when kVector: ld and src
// 16-byte aligned) and writes 16 bytes along K (ld_dst and dst 16-byte aligned), one load and one
// store a thread, where the 32 x 32 tile above moves one byte a thread each way (27% of copy
// bandwidth on the H100). Four threads cover a 64-byte row segment, so each warp reads and writes
// whole 32-byte sectors; the tile's rows are 68 bytes apart, so the column reads of the write
// phase meet at most two-way bank conflicts.
constexpr int kByteTile = 64;
constexpr int kByteThreads = 256;  // 64 rows x 4 threads of 16 bytes
template <bool kVector>
__global__ void __launch_bounds__(kByteThreads)
    transpose_bytes_kernel(const unsigned char* __restrict__ src, long long rows, long long cols,
                           long long ld, unsigned char* __restrict__ dst, long long ld_dst,
                           long long rows_dst) {
  __shared__ alignas(16) unsigned char tile[kByteTile][kByteTile + 4];  // [p][r]
  const int row = static_cast<int>(threadIdx.x) / 4, seg = 16 * (static_cast<int>(threadIdx.x) % 4);
  const long long p0 = static_cast<long long>(blockIdx.x) * kByteTile;
  for (long long r0 = static_cast<long long>(blockIdx.y) * kByteTile; r0 < rows_dst;
       r0 += static_cast<long long>(gridDim.y) * kByteTile) {
    // Stored row p = p0 + row, bytes r0 + seg .. + 15 (zero outside rows x cols).
    {
      const long long p = p0 + row, r = r0 + seg;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (p < cols) {
        const unsigned char* at = src + p * ld + r;
        if (kVector && r + 16 <= rows) {
          v = __ldg(reinterpret_cast<const uint4*>(at));
        } else {
          unsigned int w[4] = {0, 0, 0, 0};
#pragma unroll
          for (int b = 0; b < 16; ++b) {
            if (r + b < rows) w[b / 4] |= static_cast<unsigned int>(at[b]) << (8 * (b % 4));
          }
          v = make_uint4(w[0], w[1], w[2], w[3]);
        }
      }
      auto* t = reinterpret_cast<unsigned int*>(&tile[row][seg]);
      t[0] = v.x;
      t[1] = v.y;
      t[2] = v.z;
      t[3] = v.w;
    }
    __syncthreads();
    // dst row r = r0 + row, bytes p0 + seg .. + 15: column `row` of tile rows seg .. seg + 15.
    {
      const long long r = r0 + row, p = p0 + seg;
      if (r < rows_dst && p < ld_dst) {
        unsigned int w[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          w[q] = static_cast<unsigned int>(tile[seg + 4 * q][row]) |
                 static_cast<unsigned int>(tile[seg + 4 * q + 1][row]) << 8 |
                 static_cast<unsigned int>(tile[seg + 4 * q + 2][row]) << 16 |
                 static_cast<unsigned int>(tile[seg + 4 * q + 3][row]) << 24;
        }
        *reinterpret_cast<uint4*>(dst + r * ld_dst + p) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    }
    __syncthreads();
  }
}

dim3 pack_grid(const Fp8QuantizeArgs& a, long long rows_dst) {
  const long long x = (a.ld_dst + kTile - 1) / kTile;
  const long long y = (rows_dst + kTile - 1) / kTile;
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y < 65535 ? y : 65535));
}

template <typename T>
cudaError_t quantize(const Fp8QuantizeArgs& a, long long rows_dst, cudaStream_t stream) {
  const T* src = static_cast<const T*>(a.src);
  // The stored matrix: K-major X is rows x cols, a column-stored one cols x rows.
  const long long stored_rows = a.k_major ? a.rows : a.cols;
  const long long stored_cols = a.k_major ? a.cols : a.rows;
  const bool vector = reinterpret_cast<std::uintptr_t>(src) % 16 == 0 &&
                      (a.ld * static_cast<long long>(sizeof(T))) % 16 == 0;
  const dim3 grid = row_grid(stored_rows, stored_cols);
  if (vector) {
    amax_kernel<T, true>
        <<<grid, kRowThreads, 0, stream>>>(src, stored_rows, stored_cols, a.ld, a.amax_bits);
  } else {
    amax_kernel<T, false>
        <<<grid, kRowThreads, 0, stream>>>(src, stored_rows, stored_cols, a.ld, a.amax_bits);
  }
  if (a.k_major && a.ld_dst % kPerThread == 0 && reinterpret_cast<std::uintptr_t>(a.dst) % 8 == 0) {
    const dim3 qgrid = row_grid(rows_dst, a.ld_dst);
    auto* dst = static_cast<unsigned char*>(a.dst);
    if (vector) {
      quantize_rows_kernel<T, true><<<qgrid, kRowThreads, 0, stream>>>(
          src, a.rows, a.cols, a.ld, a.amax_bits, a.scale, dst, a.ld_dst, rows_dst);
    } else {
      quantize_rows_kernel<T, false><<<qgrid, kRowThreads, 0, stream>>>(
          src, a.rows, a.cols, a.ld, a.amax_bits, a.scale, dst, a.ld_dst, rows_dst);
    }
    return cudaGetLastError();
  }
  pack_quantized_kernel<T><<<pack_grid(a, rows_dst), dim3(kTile, kRowsPerPass), 0, stream>>>(
      src, a.rows, a.cols, a.ld, a.k_major, a.amax_bits, a.scale,
      static_cast<unsigned char*>(a.dst), a.ld_dst, rows_dst);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fp8_quantize(const Fp8QuantizeArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return cudaSuccess;
  const long long rows_dst = a.rows_dst > a.rows ? a.rows_dst : a.rows;
  if (a.src_type == DType::kF8E4M3) {
    auto* dst = static_cast<unsigned char*>(a.dst);
    if (!a.k_major && a.ld_dst % 16 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) {
      const auto* src = static_cast<const unsigned char*>(a.src);
      const long long x = (a.ld_dst + kByteTile - 1) / kByteTile;
      const long long y = (rows_dst + kByteTile - 1) / kByteTile;
      const dim3 grid(static_cast<unsigned>(x < 1 ? 1 : x),
                      static_cast<unsigned>(y < 65535 ? y : 65535));
      if (a.ld % 16 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0) {
        transpose_bytes_kernel<true>
            <<<grid, kByteThreads, 0, stream>>>(src, a.rows, a.cols, a.ld, dst, a.ld_dst, rows_dst);
      } else {
        transpose_bytes_kernel<false>
            <<<grid, kByteThreads, 0, stream>>>(src, a.rows, a.cols, a.ld, dst, a.ld_dst, rows_dst);
      }
      return cudaGetLastError();
    }
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
