// fp64 GEMM on the tensor cores (DMMA): mma.sync m16n8k4 with f64 operands and accumulators,
// 128x128x16 block tiles staged in a 4-deep cp.async pipeline, 8 warps of 64x32. The CUDA-core
// ladder tops out at the FP64 pipe's FMA rate (simt_tuned); the fp64 tensor cores do twice the
// FLOPs per clock, and each mma.sync hands them 512 multiply-adds for three 8-byte fragment loads
// per lane. Shared tiles keep each operand's contiguous dimension innermost, XOR-swizzled so the
// fragment loads are conflict-free in every transpose state. Any m, n, k; alpha/beta; batched by
// blockIdx.z.
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/gemm/batch_pointers.cuh"
#include "kernels/gemm/tensor_core_kernels.h"

namespace matserve::kernels {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 16, kStages = 4;
constexpr int kWarpsN = 4, kThreads = 256;       // 2 x 4 warps
constexpr int kMI = 4, kNJ = 4;                  // a warp's 64 x 32: 4 m16 by 4 n8 fragments
constexpr int kTileDoubles = kBM * kBK;          // A and B tiles are both 128 x 16
constexpr int kStageDoubles = 2 * kTileDoubles;  // 32 KiB
constexpr int kSmemBytes = kStages * kStageDoubles * 8;
constexpr int kGroupM = 8;  // block order: 8 row-tiles share each column of B while it is in L2

// Offset (in doubles) of element (r, c) of a shared tile stored with kCols contiguous doubles per
// row (rows of 128 bytes or more), 16-byte chunks XOR-swizzled by the row: chunk ^ 2 * (row % 4).
// An 8-byte fragment load is served half a warp at a time; its 16 lanes read 32 contiguous bytes
// from each of 4 consecutive rows (rows of m or n for K-contiguous tiles, rows of k for
// MN-contiguous ones), and the swizzle puts those 4 pieces on 4 different 32-byte groups of
// banks: one wavefront per half warp, where unswizzled rows would all share the same banks.
template <int kCols>
__device__ __forceinline__ int swizzle(int r, int c) {
  const int sw = (c / 2) ^ ((r & 3) << 1);
  return r * kCols + sw * 2 + (c & 1);
}

// D (16x8) += A (16x4, row) * B (4x8, col). Lane (g = lane / 4, t = lane % 4) holds A(g, t) in a0,
// A(g + 8, t) in a1, B(t, g) in b, and D(g, 2t..2t+1), D(g + 8, 2t..2t+1) in d.
__device__ __forceinline__ void dmma16x8x4(double (&d)[4], double a0, double a1, double b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "mma.sync.aligned.m16n8k4.row.col.f64.f64.f64.f64 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};\n"
      : "+d"(d[0]), "+d"(d[1]), "+d"(d[2]), "+d"(d[3])
      : "d"(a0), "d"(a1), "d"(b));
#endif
}

// Copies the kRows x kCols tile whose top-left global element is (r0, c0) (cols contiguous in
// global memory) into its swizzled shared layout, by cp.async with zero-fill past the matrix edge:
// 16-byte copies where rows are 16-byte aligned (kVec), else two 8-byte ones.
template <int kRows, int kCols, bool kVec>
__device__ __forceinline__ void load_tile(double* dst, const double* src, long long ld,
                                          long long r0, long long c0, long long rows,
                                          long long cols) {
  constexpr int kChunks = kRows * kCols / 2;
  static_assert(kChunks % kThreads == 0, "whole chunks per thread");
#pragma unroll
  for (int i = 0; i < kChunks / kThreads; ++i) {
    const int e = threadIdx.x + i * kThreads;
    const int r = e / (kCols / 2), c = (e % (kCols / 2)) * 2;
    const long long gr = r0 + r, gc = c0 + c;
    double* d = dst + swizzle<kCols>(r, c);
    if constexpr (kVec) {
      long long valid = gr < rows ? cols - gc : 0;
      valid = valid < 0 ? 0 : (valid > 2 ? 2 : valid);
      async_copy::copy16(d, valid > 0 ? src + gr * ld + gc : src, static_cast<int>(valid * 8));
    } else {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const bool in = gr < rows && gc + x < cols;
        async_copy::copy_elem<8>(d + x, in ? src + gr * ld + gc + x : src, in ? 8 : 0);
      }
    }
  }
}

// The warp's accumulators to C: acc[i][j][x] is row i*16 + (x/2)*8, column j*8 + x%2 of the warp
// tile, whose lane-relative origin is (row0, col0). Pairs of columns go as one 16-byte store.
__device__ __forceinline__ void store_tile(const double (&acc)[kMI][kNJ][4], const GemmProblem& p,
                                           double* c, long long row0, long long col0) {
  const bool pairs = p.ldc % 2 == 0 && reinterpret_cast<std::uintptr_t>(c) % 16 == 0;
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNJ; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const long long gi = row0 + i * 16 + h * 8, gj = col0 + j * 8;
        if (gi >= p.m) continue;
        double* dst = c + gi * p.ldc + gj;
        double v0 = p.alpha * acc[i][j][h * 2], v1 = p.alpha * acc[i][j][h * 2 + 1];
        if (pairs && gj + 1 < p.n) {
          if (p.beta != 0.0) {
            const double2 old = *reinterpret_cast<const double2*>(dst);
            v0 += p.beta * old.x;
            v1 += p.beta * old.y;
          }
          *reinterpret_cast<double2*>(dst) = make_double2(v0, v1);
        } else {
          if (gj < p.n) dst[0] = p.beta != 0.0 ? v0 + p.beta * dst[0] : v0;
          if (gj + 1 < p.n) dst[1] = p.beta != 0.0 ? v1 + p.beta * dst[1] : v1;
        }
      }
}

template <bool kAT, bool kBT, bool kVec>
__global__ void __launch_bounds__(kThreads, 1) dmma_gemm_kernel(GemmProblem p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  double* smem = reinterpret_cast<double*>(smem_raw);
  // Grouped block order: consecutive blocks walk kGroupM row-tiles down a column of tiles.
  const int tiles_m = static_cast<int>((p.m + kBM - 1) / kBM);
  const int block = blockIdx.y * gridDim.x + blockIdx.x;
  const int per_group = kGroupM * gridDim.x;
  const int first_m = (block / per_group) * kGroupM;
  const int group_rows = min(kGroupM, tiles_m - first_m);
  const long long m0 = static_cast<long long>(first_m + (block % per_group) % group_rows) * kBM;
  const long long n0 = static_cast<long long>((block % per_group) / group_rows) * kBN;
  const long long z = blockIdx.z;
  const double* a = batch::a_of<double>(p.batch, p.a, z);
  const double* b = batch::b_of<double>(p.batch, p.b, z);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / kWarpsN) * kMI * 16, wn = (warp % kWarpsN) * kNJ * 8;
  const int g = lane / 4, t = lane % 4;
  const int k_tiles = static_cast<int>((p.k + kBK - 1) / kBK);

  auto load_stage = [&](int stage, int kt) {
    double* as = smem + stage * kStageDoubles;
    double* bs = as + kTileDoubles;
    const long long k0 = static_cast<long long>(kt) * kBK;
    if (kAT) {  // stored k x m
      load_tile<kBK, kBM, kVec>(as, a, p.lda, k0, m0, p.k, p.m);
    } else {
      load_tile<kBM, kBK, kVec>(as, a, p.lda, m0, k0, p.m, p.k);
    }
    if (kBT) {  // stored n x k
      load_tile<kBN, kBK, kVec>(bs, b, p.ldb, n0, k0, p.n, p.k);
    } else {
      load_tile<kBK, kBN, kVec>(bs, b, p.ldb, k0, n0, p.k, p.n);
    }
  };

  double acc[kMI][kNJ][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNJ; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[i][j][x] = 0.0;

  async_copy::multistage_mainloop<kStages>(k_tiles, load_stage, [&](int stage, int) {
    const double* as = smem + stage * kStageDoubles;
    const double* bs = as + kTileDoubles;
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 4) {
      const int k = ks + t;
      double bf[kNJ];
#pragma unroll
      for (int j = 0; j < kNJ; ++j) {
        const int n = wn + j * 8 + g;
        bf[j] = kBT ? bs[swizzle<kBK>(n, k)] : bs[swizzle<kBN>(k, n)];
      }
#pragma unroll
      for (int i = 0; i < kMI; ++i) {
        double af[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = wm + i * 16 + h * 8 + g;
          af[h] = kAT ? as[swizzle<kBM>(k, m)] : as[swizzle<kBK>(m, k)];
        }
#pragma unroll
        for (int j = 0; j < kNJ; ++j) dmma16x8x4(acc[i][j], af[0], af[1], bf[j]);
      }
    }
  });
  store_tile(acc, p, batch::c_of<double>(p.batch, p.c, z), m0 + wm + g, n0 + wn + 2 * t);
}

template <bool kAT, bool kBT, bool kVec>
cudaError_t launch_one(const GemmProblem& p, cudaStream_t stream) {
  auto kernel = dmma_gemm_kernel<kAT, kBT, kVec>;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
      e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN),
                  static_cast<unsigned>((p.m + kBM - 1) / kBM),
                  static_cast<unsigned>(p.batch.count));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  return cudaGetLastError();
}

template <bool kVec>
cudaError_t launch_trans(const GemmProblem& p, cudaStream_t stream) {
  if (p.a_trans && p.b_trans) return launch_one<true, true, kVec>(p, stream);
  if (p.a_trans) return launch_one<true, false, kVec>(p, stream);
  if (p.b_trans) return launch_one<false, true, kVec>(p, stream);
  return launch_one<false, false, kVec>(p, stream);
}

}  // namespace

const char* dmma_gemm_unsupported(const GemmProblem& p) {
  if (p.in_type != DType::kF64 || p.out_type != DType::kF64) return "fp64 operands and output";
  if ((p.m + kBM - 1) / kBM > 65535) return "m below 8388608";
  if (p.batch.count > 65535) return "at most 65535 products per batch (one grid layer each)";
  // The grouped block order indexes blocks with an int.
  if (((p.m + kBM - 1) / kBM) * ((p.n + kBN - 1) / kBN) > (1ll << 31) - 1) {
    return "at most 2^31 - 1 tiles of 128 x 128";
  }
  return nullptr;
}

cudaError_t launch_dmma_gemm(const GemmProblem& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (dmma_gemm_unsupported(p) != nullptr) return cudaErrorInvalidValue;
  // Every product's rows start on 16 bytes (2 doubles), so whole rows go by 16-byte cp.async.
  const bool vec = batch::starts_aligned16(p.batch, p.a, p.batch.stride_a, 8) && p.lda % 2 == 0 &&
                   batch::starts_aligned16(p.batch, p.b, p.batch.stride_b, 8) && p.ldb % 2 == 0;
  return vec ? launch_trans<true>(p, stream) : launch_trans<false>(p, stream);
}

}  // namespace matserve::kernels
