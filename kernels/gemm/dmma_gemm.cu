// fp64 GEMM on the tensor cores (DMMA): mma.sync m16n8k4 with f64 operands and accumulators,
// 128x64x16 block tiles of 4 warps (64x32 each) staged in a 4-deep cp.async pipeline, two blocks
// per SM, fragments double-buffered in registers across k-steps and k-tiles. The CUDA-core ladder
// tops out at the FP64 pipe's FMA rate (simt_tuned); the fp64 tensor cores do twice the FLOPs per
// clock, and each mma.sync hands them 512 multiply-adds for three 8-byte fragment loads per lane.
// Two independent blocks per SM keep the tensor pipe fed while the other waits at its barrier, and
// each thread's copies are set up once per block (pointer, swizzled destinations, edge bounds), so
// a k-tile costs one pointer bump and its cp.asyncs. Shared tiles keep each operand's contiguous
// dimension innermost, XOR-swizzled so the fragment loads are conflict-free in every transpose
// state. Any m, n, k; alpha/beta; batched by blockIdx.z.
#include <cstdint>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/mma_sm80.cuh"
#include "kernels/gemm/batch_pointers.cuh"
#include "kernels/gemm/tensor_core_kernels.h"

namespace matserve::kernels {
namespace {

constexpr int kBM = 128, kBN = 64, kBK = 16, kStages = 4;
constexpr int kWarpsN = 2, kThreads = 128;  // 2 x 2 warps
constexpr int kMinBlocks = 2;               // 2 x 96 KiB of shared memory, <= 256 registers
constexpr int kMI = 4, kNJ = 4;             // a warp's 64 x 32: 4 m16 by 4 n8 fragments
constexpr int kATile = kBM * kBK, kBTile = kBN * kBK;
constexpr int kStageDoubles = kATile + kBTile;
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

// One thread's share of the cp.async copies of a kRows x kCols shared tile whose columns are
// contiguous in global memory, one 16-byte chunk (two doubles) at a time: one 16-byte copy where
// rows start on 16 bytes (kVec), else two 8-byte ones; zero-fill past the matrix edge. Everything
// that does not change from one k-tile to the next is computed once: the thread's source pointer
// (advanced by one k-tile per call), its swizzled destinations, and how much of the matrix lies
// past its first row and column along the dimension that is not k. kKRows: the tile's rows run
// along k (the pointer advances by 16 rows), else its columns do.
template <int kRows, int kCols, bool kKRows, bool kVec>
struct TileCopier {
  static constexpr int kChunksPerRow = kCols / 2;
  static_assert(kThreads % kChunksPerRow == 0, "whole rows per pass");
  static constexpr int kRowStep = kThreads / kChunksPerRow;
  static constexpr int kPer = kRows / kRowStep;
  static_assert(kPer * kRowStep == kRows, "whole passes");
  // Rows r and r + kPeriod * kRowStep share a swizzle (a multiple of 4 rows apart).
  static constexpr int kPeriod = kRowStep % 4 == 0 ? 1 : 4 / kRowStep;

  const double* src;       // this thread's first chunk in the next k-tile
  const double* fallback;  // a readable address for copies that read nothing
  long long step;          // kRowStep rows of global memory
  long long k_advance;     // one k-tile
  int dst[kPeriod];        // swizzled offsets of the thread's first kPeriod chunks
  int r, c;                // its first chunk's row and column in the tile
  int fixed_left;  // non-k dimension: matrix rows (kKRows: columns, 0..2) left from its chunk

  __device__ TileCopier(const double* base, long long ld, long long r0, long long c0,
                        long long rows, long long cols, int tid)
      : fallback(base), step(kRowStep * ld), k_advance(kKRows ? 16 * ld : 16) {
    r = tid / kChunksPerRow;
    c = (tid % kChunksPerRow) * 2;
    src = base + (r0 + r) * ld + c0 + c;
#pragma unroll
    for (int j = 0; j < kPeriod; ++j) dst[j] = swizzle<kCols>(r + j * kRowStep, c);
    const long long left = kKRows ? cols - c0 - c : rows - r0 - r;
    const long long cap = kKRows ? 2 : kRows;
    fixed_left = static_cast<int>(left < 0 ? 0 : (left > cap ? cap : left));
  }

  // Issues the copies of the next k-tile, of which k_left (> 0) values of k are in the matrix.
  __device__ __forceinline__ void copy(double* tile, int k_left) {
    const int row_left = kKRows ? k_left - r : fixed_left;
    int col_left = fixed_left;  // 0, 1 or 2 doubles of the chunk in the matrix
    if constexpr (!kKRows) {
      const int left = k_left - c;
      col_left = left < 0 ? 0 : (left > 2 ? 2 : left);
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int cols_in = i * kRowStep < row_left ? col_left : 0;
      double* d = tile + dst[i % kPeriod] + (i / kPeriod) * kPeriod * kRowStep * kCols;
      const double* s = src + i * step;
      if constexpr (kVec) {
        async_copy::copy16(d, cols_in > 0 ? s : fallback, cols_in * 8);
      } else {
#pragma unroll
        for (int x = 0; x < 2; ++x) {
          async_copy::copy_elem<8>(d + x, x < cols_in ? s + x : fallback, x < cols_in ? 8 : 0);
        }
      }
    }
    src += k_advance;
  }
};

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

template <OperandOrder kOrderA, OperandOrder kOrderB, bool kVec>
__global__ void __launch_bounds__(kThreads, kMinBlocks) dmma_gemm_kernel(GemmProblem p) {
  // A stored k x m (transposed), B stored n x k (transposed): the operands' rows in shared memory.
  constexpr bool kAT = kOrderA == OperandOrder::kMNMajor, kBT = kOrderB == OperandOrder::kKMajor;
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

  // A is stored k x m when transposed, B n x k when transposed; tiles keep that orientation.
  using CopyA = TileCopier<kAT ? kBK : kBM, kAT ? kBM : kBK, kAT, kVec>;
  using CopyB = TileCopier<kBT ? kBN : kBK, kBT ? kBK : kBN, !kBT, kVec>;
  CopyA copy_a(a, p.lda, kAT ? 0 : m0, kAT ? m0 : 0, kAT ? p.k : p.m, kAT ? p.m : p.k, threadIdx.x);
  CopyB copy_b(b, p.ldb, kBT ? n0 : 0, kBT ? 0 : n0, kBT ? p.n : p.k, kBT ? p.k : p.n, threadIdx.x);

  auto load_stage = [&](int stage, int kt) {
    double* as = smem + stage * kStageDoubles;
    const long long left = p.k - static_cast<long long>(kt) * kBK;
    const int k_left = static_cast<int>(left > kBK ? kBK : left);
    copy_a.copy(as, k_left);
    copy_b.copy(as + kATile, k_left);
  };

  double acc[kMI][kNJ][4];
#pragma unroll
  for (int i = 0; i < kMI; ++i)
#pragma unroll
    for (int j = 0; j < kNJ; ++j)
#pragma unroll
      for (int x = 0; x < 4; ++x) acc[i][j][x] = 0.0;

  // One k-step's fragments: A rows g and g + 8 of each m16, B column g of each n8, at k = ks + t.
  auto load_frags = [&](double(&af)[kMI][2], double(&bf)[kNJ], int stage, int ks) {
    const double* as = smem + stage * kStageDoubles;
    const double* bs = as + kATile;
    const int k = ks + t;
#pragma unroll
    for (int j = 0; j < kNJ; ++j) {
      const int n = wn + j * 8 + g;
      bf[j] = kBT ? bs[swizzle<kBK>(n, k)] : bs[swizzle<kBN>(k, n)];
    }
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = wm + i * 16 + h * 8 + g;
        af[i][h] = kAT ? as[swizzle<kBM>(k, m)] : as[swizzle<kBK>(m, k)];
      }
  };
  auto mma_step = [&](const double(&af)[kMI][2], const double(&bf)[kNJ]) {
#pragma unroll
    for (int i = 0; i < kMI; ++i)
#pragma unroll
      for (int j = 0; j < kNJ; ++j) mma_sm80::mma_m16n8k4_f64(acc[i][j], af[i][0], af[i][1], bf[j]);
  };
  // The multistage ring of async_copy::multistage_mainloop, with the fragments double-buffered in
  // registers across k-steps and across the k-tile boundary: the barrier, the refill and the next
  // tile's first fragment loads come before the current tile's last k-step of mma, so no warp
  // waits on shared-memory latency at a tile boundary (+5-7% over loading each k-step's
  // fragments just before its mma).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    async_copy::commit();
  }
  async_copy::wait<kStages - 2>();
  __syncthreads();
  double af[2][kMI][2], bf[2][kNJ];
  load_frags(af[0], bf[0], 0, 0);
  for (int kt = 0; kt < k_tiles; ++kt) {
#pragma unroll
    for (int step = 0; step < kBK / 4; ++step) {
      if (step == kBK / 4 - 1) {
        async_copy::wait<kStages - 3>();  // k-tile kt + 1 has landed
        __syncthreads();                  // and every warp is done reading k-tile kt - 1
        const int next = kt + kStages - 1;
        if (next < k_tiles) load_stage(next % kStages, next);
        async_copy::commit();
        if (kt + 1 < k_tiles) load_frags(af[0], bf[0], (kt + 1) % kStages, 0);
      } else {
        load_frags(af[(step + 1) % 2], bf[(step + 1) % 2], kt % kStages, (step + 1) * 4);
      }
      mma_step(af[step % 2], bf[step % 2]);
    }
  }
  async_copy::wait<0>();
  store_tile(acc, p, batch::c_of<double>(p.batch, p.c, z), m0 + wm + g, n0 + wn + 2 * t);
}

template <OperandOrder kOrderA, OperandOrder kOrderB, bool kVec>
cudaError_t launch_one(const GemmProblem& p, cudaStream_t stream) {
  auto kernel = dmma_gemm_kernel<kOrderA, kOrderB, kVec>;
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
  constexpr OperandOrder kK = OperandOrder::kKMajor, kMN = OperandOrder::kMNMajor;
  if (p.a_trans && p.b_trans) return launch_one<kMN, kK, kVec>(p, stream);
  if (p.a_trans) return launch_one<kMN, kMN, kVec>(p, stream);
  if (p.b_trans) return launch_one<kK, kK, kVec>(p, stream);
  return launch_one<kK, kMN, kVec>(p, stream);
}

}  // namespace

const char* dmma_gemm_unsupported(const GemmProblem& p) {
  if (p.in_type != DType::kF64 || p.out_type != DType::kF64) return "fp64 operands and output";
  if ((p.m + kBM - 1) / kBM > 65535) return "m below 8388608";
  if (p.batch.count > 65535) return "at most 65535 products per batch (one grid layer each)";
  // The grouped block order indexes blocks with an int.
  if (((p.m + kBM - 1) / kBM) * ((p.n + kBN - 1) / kBN) > (1ll << 31) - 1) {
    return "at most 2^31 - 1 tiles of 128 x 64";
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
