// WMMA 16x16x16 tensor-core GEMM (the seeds' rung): each 4-warp block stages a 64x64x32 tile of
// A' and B' in shared memory (bounds-checked, zero-filled, either operand order), and each warp
// computes 32x32 with 2x2 wmma fragments. Tensor cores instead of FFMA are ~8x the SIMT rate; the
// epilogue goes through shared memory so edge tiles of any shape are written exactly once.
#include <mma.h>

#include "kernels/gemm/tensor_core_kernels.h"

namespace matserve::kernels {
namespace {

using namespace nvcuda;

constexpr int kBM = 64, kBN = 64, kBK = 32, kThreads = 128;
constexpr int kLdA = kBK + 8;  // padded smem rows (halves)
constexpr int kLdB = kBN + 8;
constexpr int kLdC = kBN + 4;  // floats

template <typename T, bool kATrans, bool kBTrans>
__global__ void __launch_bounds__(kThreads) wmma_gemm_kernel(GemmProblem p, OutputKind out) {
  __shared__ __align__(32) T as[kBM * kLdA];
  __shared__ __align__(32) T bs[kBK * kLdB];
  __shared__ __align__(32) float cs[kBM * kLdC];
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const long long m0 = static_cast<long long>(blockIdx.y) * kBM;
  const long long n0 = static_cast<long long>(blockIdx.x) * kBN;
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

  for (long long k0 = 0; k0 < p.k; k0 += kBK) {
    // A' tile (64 x 32) -> as[i][kk]; the thread order follows the contiguous dimension.
    for (int e = tid; e < kBM * kBK; e += kThreads) {
      const int i = kATrans ? e % kBM : e / kBK;
      const int kk = kATrans ? e / kBM : e % kBK;
      const long long gi = m0 + i, gk = k0 + kk;
      T v = tc::from_f32<T>(0.0f);
      if (gi < p.m && gk < p.k) v = kATrans ? a[gk * p.lda + gi] : a[gi * p.lda + gk];
      as[i * kLdA + kk] = v;
    }
    // B' tile (32 x 64) -> bs[kk][j].
    for (int e = tid; e < kBK * kBN; e += kThreads) {
      const int j = kBTrans ? e / kBK : e % kBN;
      const int kk = kBTrans ? e % kBK : e / kBN;
      const long long gj = n0 + j, gk = k0 + kk;
      T v = tc::from_f32<T>(0.0f);
      if (gj < p.n && gk < p.k) v = kBTrans ? b[gj * p.ldb + gk] : b[gk * p.ldb + gj];
      bs[kk * kLdB + j] = v;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[2];
      for (int i = 0; i < 2; ++i)
        wmma::load_matrix_sync(fa[i], as + (wm + i * 16) * kLdA + kk, kLdA);
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], bs + kk * kLdB + wn + j * 16, kLdB);
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      wmma::store_matrix_sync(cs + (wm + i * 16) * kLdC + wn + j * 16, acc[i][j], kLdC,
                              wmma::mem_row_major);
  __syncthreads();
  const float alpha = static_cast<float>(p.alpha), beta = static_cast<float>(p.beta);
  for (int e = tid; e < kBM * kBN; e += kThreads) {
    const int i = e / kBN, j = e % kBN;
    const long long gi = m0 + i, gj = n0 + j;
    if (gi < p.m && gj < p.n) tc::store_c(p.c, gi * p.ldc + gj, out, cs[i * kLdC + j], alpha, beta);
  }
}

template <typename T>
cudaError_t launch_typed(const GemmProblem& p, OutputKind out, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.n + kBN - 1) / kBN),
                  static_cast<unsigned>((p.m + kBM - 1) / kBM));
  if (p.a_trans && p.b_trans) {
    wmma_gemm_kernel<T, true, true><<<grid, kThreads, 0, stream>>>(p, out);
  } else if (p.a_trans) {
    wmma_gemm_kernel<T, true, false><<<grid, kThreads, 0, stream>>>(p, out);
  } else if (p.b_trans) {
    wmma_gemm_kernel<T, false, true><<<grid, kThreads, 0, stream>>>(p, out);
  } else {
    wmma_gemm_kernel<T, false, false><<<grid, kThreads, 0, stream>>>(p, out);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_wmma_gemm(const GemmProblem& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if ((p.m + kBM - 1) / kBM > 65535) return cudaErrorInvalidValue;
  const OutputKind out = output_kind(p.out_type);
  if (p.in_type == DType::kF16) return launch_typed<__half>(p, out, stream);
  if (p.in_type == DType::kBF16) return launch_typed<__nv_bfloat16>(p, out, stream);
  return cudaErrorInvalidValue;
}

}  // namespace matserve::kernels
