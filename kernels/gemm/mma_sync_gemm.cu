// mma.sync m16n8k16 GEMM (Ampere-style): 128x128x32 block tiles staged in a 4-deep cp.async
// pipeline (16-byte copies, edge chunks zero-filled through cp.async's src-size), fragments read
// with ldmatrix (.trans for m- or n-contiguous operands), 8 warps of 64x32. Overlapping copies
// with math and ldmatrix's conflict-free padded rows are what WMMA's synchronous staging lacks.
// A batched problem adds a grid dimension: blockIdx.z is the product.
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/gemm/batch_pointers.cuh"
#include "kernels/gemm/tensor_core_kernels.h"

namespace matserve::kernels {
namespace {

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;
constexpr int kPad = 8;  // halves: 16 bytes, keeps ldmatrix's 8 row addresses in distinct banks
// Stage sizes in halves: an operand tile is stored with its contiguous dimension innermost.
constexpr int a_rows(bool t) {
  return t ? kBK : kBM;
}
constexpr int a_ld(bool t) {
  return (t ? kBM : kBK) + kPad;
}
constexpr int b_rows(bool t) {
  return t ? kBN : kBK;
}
constexpr int b_ld(bool t) {
  return (t ? kBK : kBN) + kPad;
}
constexpr int stage_halves(bool at, bool bt) {
  return a_rows(at) * a_ld(at) + b_rows(bt) * b_ld(bt);
}
constexpr int smem_bytes(bool at, bool bt) {
  return stage_halves(at, bt) * 2 * kStages;
}

using mma_sm80::ldmatrix_x4;
using mma_sm80::ldmatrix_x4_trans;

// One m16n8k16 mma.sync for the operand type T (fp16 or bf16).
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    mma_sm80::mma_m16n8k16_f32_f16(d, a, b0, b1);
  } else {
    mma_sm80::mma_m16n8k16_f32_bf16(d, a, b0, b1);
  }
}

// Copies one rows x cols tile (cols contiguous in global and shared memory) whose top-left global
// element is (r0, c0) of a matrix with `rows_total` x `cols_total` valid elements. kVec: 16-byte
// cp.async chunks with zero-fill (needs 16-byte aligned rows); else predicated scalar loads.
template <typename T, int kRows, int kCols, bool kVec>
__device__ __forceinline__ void load_tile(T* dst, int ld_s, const T* src, long long ld_g,
                                          long long r0, long long c0, long long rows_total,
                                          long long cols_total) {
  constexpr int kChunks = kRows * kCols / 8;
  for (int e = threadIdx.x; e < kChunks; e += kThreads) {
    const int r = e / (kCols / 8), c = (e % (kCols / 8)) * 8;
    const long long gr = r0 + r, gc = c0 + c;
    T* d = dst + r * ld_s + c;
    if constexpr (kVec) {
      long long valid = gr < rows_total ? cols_total - gc : 0;
      valid = valid < 0 ? 0 : (valid > 8 ? 8 : valid);
      const T* s = valid > 0 ? src + gr * ld_g + gc : src;
      async_copy::copy16(d, s, static_cast<int>(valid * 2));
    } else {
#pragma unroll
      for (int x = 0; x < 8; ++x) {
        d[x] = (gr < rows_total && gc + x < cols_total) ? src[gr * ld_g + gc + x]
                                                        : tc::from_f32<T>(0.0f);
      }
    }
  }
}

// The warp's 64x32 accumulators to C: fragment element x of tile (i, j) is at row
// i*16 + (x/2)*8 (+ row0), column j*8 + x%2 (+ col0).
template <typename O>
__device__ __forceinline__ void store_tile(const float (&acc)[4][4][4], const GemmProblem& p, O* c,
                                           long long row0, long long col0, float alpha,
                                           float beta) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) {
        const long long gi = row0 + i * 16 + (x / 2) * 8;
        const long long gj = col0 + j * 8 + (x % 2);
        if (gi < p.m && gj < p.n) {
          O* dst = c + gi * p.ldc + gj;
          const float v = alpha * acc[i][j][x];
          *dst = tc::from_f32<O>(beta != 0.0f ? v + beta * tc::to_f32<O>(*dst) : v);
        }
      }
}

template <typename T, OperandOrder kOrderA, OperandOrder kOrderB, bool kVec>
__global__ void __launch_bounds__(kThreads) mma_sync_gemm_kernel(GemmProblem p, OutputKind out) {
  // A stored k x m (transposed), B stored n x k (transposed): the operands' rows in shared memory.
  constexpr bool kAT = kOrderA == OperandOrder::kMNMajor, kBT = kOrderB == OperandOrder::kKMajor;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  constexpr int kStage = stage_halves(kAT, kBT);
  constexpr int kAld = a_ld(kAT), kBld = b_ld(kBT);
  constexpr int kAHalves = a_rows(kAT) * kAld;
  const long long z = blockIdx.z;
  const T* a = batch::a_of<T>(p.batch, p.a, z);
  const T* b = batch::b_of<T>(p.batch, p.b, z);
  const long long m0 = static_cast<long long>(blockIdx.y) * kBM;
  const long long n0 = static_cast<long long>(blockIdx.x) * kBN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int k_tiles = static_cast<int>((p.k + kBK - 1) / kBK);

  auto load_stage = [&](int stage, int kt) {
    T* as = smem + stage * kStage;
    T* bs = as + kAHalves;
    const long long k0 = static_cast<long long>(kt) * kBK;
    if (kAT) {  // stored k x m: rows k, m contiguous
      load_tile<T, kBK, kBM, kVec>(as, kAld, a, p.lda, k0, m0, p.k, p.m);
    } else {
      load_tile<T, kBM, kBK, kVec>(as, kAld, a, p.lda, m0, k0, p.m, p.k);
    }
    if (kBT) {  // stored n x k
      load_tile<T, kBN, kBK, kVec>(bs, kBld, b, p.ldb, n0, k0, p.n, p.k);
    } else {
      load_tile<T, kBK, kBN, kVec>(bs, kBld, b, p.ldb, k0, n0, p.k, p.n);
    }
  };

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[i][j][x] = 0.0f;

  const int q = lane / 8, r8 = lane % 8;
  async_copy::multistage_mainloop<kStages>(k_tiles, load_stage, [&](int stage, int) {
    const T* as = smem + stage * kStage;
    const T* bs = as + kAHalves;
#pragma unroll
    for (int ks = 0; ks < kBK; ks += 16) {
      std::uint32_t af[4][4];
      std::uint32_t bf[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int mb = wm + i * 16;
        if (kAT) {  // as[k][m]
          ldmatrix_x4_trans(af[i], as + (ks + r8 + (q / 2) * 8) * kAld + mb + (q % 2) * 8);
        } else {  // as[m][k]
          ldmatrix_x4(af[i], as + (mb + (lane % 16)) * kAld + ks + (lane / 16) * 8);
        }
      }
#pragma unroll
      for (int j = 0; j < 4; j += 2) {
        const int nb = wn + j * 8;
        std::uint32_t r[4];
        if (kBT) {  // bs[n][k]
          ldmatrix_x4(r, bs + (nb + r8 + (q / 2) * 8) * kBld + ks + (q % 2) * 8);
        } else {  // bs[k][n]
          ldmatrix_x4_trans(r, bs + (ks + r8 + (q % 2) * 8) * kBld + nb + (q / 2) * 8);
        }
        bf[j][0] = r[0];
        bf[j][1] = r[1];
        bf[j + 1][0] = r[2];
        bf[j + 1][1] = r[3];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma16816<T>(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  });

  const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
  const int g = lane / 4, t2 = (lane % 4) * 2;
  if (out == OutputKind::kF32) {
    store_tile<float>(acc, p, batch::c_of<float>(p.batch, p.c, z), m0 + wm + g, n0 + wn + t2, alpha,
                      beta);
  } else if (out == OutputKind::kF16) {
    store_tile<__half>(acc, p, batch::c_of<__half>(p.batch, p.c, z), m0 + wm + g, n0 + wn + t2,
                       alpha, beta);
  } else {
    store_tile<__nv_bfloat16>(acc, p, batch::c_of<__nv_bfloat16>(p.batch, p.c, z), m0 + wm + g,
                              n0 + wn + t2, alpha, beta);
  }
}

template <typename T, OperandOrder kOrderA, OperandOrder kOrderB, bool kVec>
cudaError_t launch_one(const GemmProblem& p, OutputKind out, cudaStream_t stream) {
  auto kernel = mma_sync_gemm_kernel<T, kOrderA, kOrderB, kVec>;
  constexpr int bytes =
      smem_bytes(kOrderA == OperandOrder::kMNMajor, kOrderB == OperandOrder::kKMajor);
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess) {
    return e;
  }
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN),
                  static_cast<unsigned>((p.m + kBM - 1) / kBM),
                  static_cast<unsigned>(p.batch.count));
  kernel<<<grid, kThreads, bytes, stream>>>(p, out);
  return cudaGetLastError();
}

template <typename T, bool kVec>
cudaError_t launch_trans(const GemmProblem& p, OutputKind out, cudaStream_t stream) {
  constexpr OperandOrder kK = OperandOrder::kKMajor, kMN = OperandOrder::kMNMajor;
  if (p.a_trans && p.b_trans) return launch_one<T, kMN, kK, kVec>(p, out, stream);
  if (p.a_trans) return launch_one<T, kMN, kMN, kVec>(p, out, stream);
  if (p.b_trans) return launch_one<T, kK, kK, kVec>(p, out, stream);
  return launch_one<T, kK, kMN, kVec>(p, out, stream);
}

// Every product's rows start on 16 bytes (8 halves), so whole rows go by 16-byte cp.async.
bool aligned16(const GemmBatch& batch, const void* ptr, long long ld, long long stride) {
  return batch::starts_aligned16(batch, ptr, stride, 2) && ld % 8 == 0;
}

template <typename T>
cudaError_t launch_typed(const GemmProblem& p, OutputKind out, cudaStream_t stream) {
  if (aligned16(p.batch, p.a, p.lda, p.batch.stride_a) &&
      aligned16(p.batch, p.b, p.ldb, p.batch.stride_b))
    return launch_trans<T, true>(p, out, stream);
  return launch_trans<T, false>(p, out, stream);
}

}  // namespace

cudaError_t launch_mma_sync_gemm(const GemmProblem& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if ((p.m + kBM - 1) / kBM > 65535 || p.batch.count > 65535) return cudaErrorInvalidValue;
  const OutputKind out = output_kind(p.out_type);
  if (p.in_type == DType::kF16) return launch_typed<__half>(p, out, stream);
  if (p.in_type == DType::kBF16) return launch_typed<__nv_bfloat16>(p, out, stream);
  return cudaErrorInvalidValue;
}

}  // namespace matserve::kernels
