// Hopper wgmma GEMM (sm_90a): TMA loads 128-byte-swizzled tiles, a producer warpgroup feeds a
// 4-stage mbarrier pipeline, two consumer warpgroups run wgmma m64n256k16 (m64n128 on small grids)
// from shared memory over persistent 128xBN tiles; no thread spends registers or issue slots on
// copies or fragment loads, unlike mma.sync. tf32: same pipeline, 32-float rows, K-major only.
// fp8 e4m3: same pipeline, 128-element rows (twice the K per stage, the same bytes), K-major only,
// wgmma k32 at twice the 16-bit rate, per-tensor dequant scales read on the device. Its fp32
// accumulators keep about 14 bits of the running sum on Hopper; the promoted form moves each
// stage's partial sum (128 of K) into a second set of registers in full fp32, as cuBLASLt does by
// default, at the cost of 128-wide tiles (two accumulator sets must fit) and a wait per stage.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <mutex>
#include <type_traits>

#include "kernels/cuda/async_copy.cuh"
#include "kernels/cuda/hopper.cuh"
#include "kernels/gemm/tensor_core_kernels.h"

namespace matserve::kernels {
namespace {

constexpr int kBM = 128;
// Every operand row in shared memory is 128 bytes (one swizzle span): 128 e4m3, 64 fp16/bf16 or
// 32 fp32.
template <typename T>
constexpr int kBK = 128 / static_cast<int>(sizeof(T));
constexpr int kWarpgroup = 128;           // threads: 4 warps issue each wgmma together
constexpr int kThreads = 3 * kWarpgroup;  // warpgroup 0 produces, 1 and 2 consume
[[maybe_unused]] constexpr int kGroupM =
    8;  // tile order: 8 M-tiles share each B tile while it is in L2

struct WgParams {
  long long m, n, k;
  void* c;
  long long ldc;
  float alpha, beta;
  // fp8 only: device pointers to the per-tensor dequant scales that multiply alpha (null: 1).
  const float* scale_a;
  const float* scale_b;
  OutputKind out;
  int tiles_m, tiles_n, k_tiles;
};

// Shared memory in units of the 128-byte swizzle: an operand row is one span (kRowBytes), a TMA
// box or a consumer's share of the A tile is 64 rows (kBoxBytes), and 8 rows (kAtomBytes) are one
// swizzle pattern, the descriptors' stride between groups of 8 rows and the base alignment.
// (maybe_unused: the plain sm_90 pass compiles the kernel body out.)
constexpr int kRowBytes = 128;
[[maybe_unused]] constexpr int kBoxBytes = 64 * kRowBytes;
constexpr int kAtomBytes = 8 * kRowBytes;
// One wgmma reads 32 bytes of K: 32 e4m3, 16 fp16/bf16 or 8 tf32. Along a K-major row that is a
// 32-byte step; an MN-major tile stores K as rows, so it is 16 rows. A stage's 128-byte rows hold 4
// steps.
constexpr int kKStepBytes = 32;
[[maybe_unused]] constexpr int kMnKStepBytes = 16 * kRowBytes;
[[maybe_unused]] constexpr int kKSteps = kRowBytes / kKStepBytes;
// K-major descriptors with the 128-byte swizzle ignore the leading-byte offset.
[[maybe_unused]] constexpr int kUnusedLbo = 16;

// A block's shared memory, from a base aligned to kAtomBytes: kStages stages of (A tile, B tile),
// then (TMA-store epilogue only) one 64 x kBN 16-bit output tile per consumer warpgroup, then the
// pipeline's mbarriers. The output tiles cost one stage at kBN = 256 (227 KB per SM). fp8 at
// kBN = 128 runs through a stage in half the 16-bit time, so it keeps 6 stages in flight.
template <typename T, int kBN, bool kTmaStore>
struct SmemLayout {
  static constexpr int kStages = kBN == 256 ? (kTmaStore ? 3 : 4) : (sizeof(T) == 1 ? 6 : 4);
  static constexpr int kABytes = kBM * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBN * kRowBytes;  // then the B tile
  static constexpr int kCHalfBytes = 64 * kBN * 2;
  static constexpr int kCOffset = kStages * kStageBytes;
  static constexpr int kBarOffset = kCOffset + (kTmaStore ? 2 * kCHalfBytes : 0);
  // Dynamic shared memory to ask for: the base is rounded up to kAtomBytes within it.
  static constexpr int kBytes = kBarOffset + kAtomBytes + hopper::MbarPipeline<kStages>::kBytes;
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
using hopper::smem_desc;
using hopper::tma_load_2d;

using async_copy::smem_u32;

__device__ __forceinline__ void tile_coords(int tile, const WgParams& p, int& tm, int& tn) {
  const int per_group = kGroupM * p.tiles_n;
  const int group = tile / per_group;
  const int first_m = group * kGroupM;
  const int rows = min(kGroupM, p.tiles_m - first_m);
  const int in_group = tile % per_group;
  tm = first_m + in_group % rows;
  tn = in_group / rows;
}

template <typename O, int kBN>
__device__ __forceinline__ void store_acc(const float (&acc)[kBN / 2], const WgParams& p,
                                          float alpha, long long row0, long long col0) {
  O* c = static_cast<O*>(p.c);
  const bool full = row0 + 64 <= p.m && col0 + kBN <= p.n;
  const int t = threadIdx.x % kWarpgroup, w = t / 32, l = t % 32;
  const long long r = row0 + w * 16 + l / 4;
  const int cc = (l % 4) * 2;
  const bool vec = full && p.beta == 0.0f && (p.ldc % 2) == 0 &&
                   (reinterpret_cast<std::uintptr_t>(c) % (2 * sizeof(O))) == 0;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long gi = r + h * 8;
      const long long gj = col0 + j * 8 + cc;
      const float v0 = alpha * acc[j * 4 + h * 2], v1 = alpha * acc[j * 4 + h * 2 + 1];
      O* dst = c + gi * p.ldc + gj;
      if (vec) {
        if constexpr (sizeof(O) == 4) {
          *reinterpret_cast<float2*>(dst) = make_float2(v0, v1);
        } else {
          O pair[2] = {tc::from_f32<O>(v0), tc::from_f32<O>(v1)};
          *reinterpret_cast<std::uint32_t*>(dst) = *reinterpret_cast<std::uint32_t*>(pair);
        }
      } else if (gi < p.m) {
        if (gj < p.n) {
          dst[0] = tc::from_f32<O>(p.beta != 0.0f ? v0 + p.beta * tc::to_f32<O>(dst[0]) : v0);
        }
        if (gj + 1 < p.n) {
          dst[1] = tc::from_f32<O>(p.beta != 0.0f ? v1 + p.beta * tc::to_f32<O>(dst[1]) : v1);
        }
      }
    }
  }
}

// Epilogue through shared memory: the warpgroup writes its 64 x kBN tile (alpha applied, 16-bit)
// into `sc` as kBN / 64 boxes of 64 x 64, each in the TMA's 128-byte swizzle (16-byte chunk c of
// row r stored at chunk c ^ (r % 8)), and one thread hands the boxes to TMA bulk stores, which clip
// at the matrix edge and run while the warpgroup starts the next tile's mainloop. The swizzle makes
// the stores conflict-free: the 8 rows a warp writes at once land on 8 different chunks of one
// 128-byte row of banks, where a dense 64 x kBN tile would put all 8 on the same banks (8-way).
template <typename O, int kBN>
__device__ __forceinline__ void store_acc_tma(const float (&acc)[kBN / 2], float alpha,
                                              std::uint32_t sc, const CUtensorMap* map, int row0,
                                              int col0, int c) {
  const int t = threadIdx.x % kWarpgroup, w = t / 32, l = t % 32;
  if (t == 0) hopper::bulk_wait_group_read<0>();
  hopper::named_barrier_sync<kWarpgroup>(1 + c);
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = w * 16 + l / 4 + h * 8;
      const int box = j / 8, chunk = (j % 8) ^ (r % 8);
      O pair[2] = {tc::from_f32<O>(alpha * acc[j * 4 + h * 2]),
                   tc::from_f32<O>(alpha * acc[j * 4 + h * 2 + 1])};
      const std::uint32_t v = *reinterpret_cast<std::uint32_t*>(pair);
      const std::uint32_t addr = sc + box * kBoxBytes + r * kRowBytes + chunk * 16 + (l % 4) * 4;
      hopper::st_shared_u32(addr, v);
    }
  }
  hopper::fence_proxy_async_shared();
  hopper::named_barrier_sync<kWarpgroup>(1 + c);
  if (t == 0) {
#pragma unroll
    for (int box = 0; box < kBN / 64; ++box) {
      hopper::tma_store_2d(map, sc + box * kBoxBytes, col0 + 64 * box, row0);
    }
    hopper::bulk_commit_group();
  }
}

// One k-step of the tile: the wgmma for T and kBN (tf32 only at kBN = 256); scale_d == 0 starts
// the accumulators afresh.
template <int kBN, int kTransA, int kTransB, typename T>
__device__ __forceinline__ void wgmma_step(float (&acc)[kBN / 2], std::uint64_t da,
                                           std::uint64_t db, int scale_d) {
  if constexpr (sizeof(T) == 4) {
    hopper::wgmma_m64n256k8_f32_tf32(acc, da, db, scale_d);
  } else if constexpr (sizeof(T) == 1) {
    if constexpr (kBN == 256) {
      hopper::wgmma_m64n256k32_f32_e4m3(acc, da, db, scale_d);
    } else {
      hopper::wgmma_m64n128k32_f32_e4m3(acc, da, db, scale_d);
    }
  } else if constexpr (std::is_same_v<T, __half>) {
    if constexpr (kBN == 256) {
      hopper::wgmma_m64n256k16_f32_f16<kTransA, kTransB>(acc, da, db, scale_d);
    } else {
      hopper::wgmma_m64n128k16_f32_f16<kTransA, kTransB>(acc, da, db, scale_d);
    }
  } else if constexpr (kBN == 256) {
    hopper::wgmma_m64n256k16_f32_bf16<kTransA, kTransB>(acc, da, db, scale_d);
  } else {
    hopper::wgmma_m64n128k16_f32_bf16<kTransA, kTransB>(acc, da, db, scale_d);
  }
}

// alpha times the dequant scales (fp8), read once per consumer.
__device__ __forceinline__ float scaled_alpha(const WgParams& p) {
  float alpha = p.alpha;
  if (p.scale_a != nullptr) alpha *= *p.scale_a;
  if (p.scale_b != nullptr) alpha *= *p.scale_b;
  return alpha;
}

// The producer (one thread): for each of the block's tiles, every k-tile of A and B by TMA into
// the next free stage, the stage's full barrier counting the bytes.
template <typename T, int kBN, OperandOrder kOrderA, OperandOrder kOrderB, bool kTmaStore>
__device__ __forceinline__ void produce(
    const CUtensorMap& tma_a, const CUtensorMap& tma_b, const WgParams& p, int num_tiles,
    std::uint32_t base, const hopper::MbarPipeline<SmemLayout<T, kBN, kTmaStore>::kStages>& pipe) {
  using L = SmemLayout<T, kBN, kTmaStore>;
  hopper::PipelineState<L::kStages> st;
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int tm, tn;
    tile_coords(tile, p, tm, tn);
    const int m0 = tm * kBM, n0 = tn * kBN;
    for (int kt = 0; kt < p.k_tiles; ++kt) {
      pipe.producer_acquire(st, L::kStageBytes);
      const std::uint32_t full = pipe.full(st.stage());
      const std::uint32_t sa = base + st.stage() * L::kStageBytes, sb = sa + L::kABytes;
      const int k0 = kt * kBK<T>;
      if (kOrderA == OperandOrder::kMNMajor) {
        tma_load_2d(sa, &tma_a, full, m0, k0);
        tma_load_2d(sa + kBoxBytes, &tma_a, full, m0 + 64, k0);
      } else {
        tma_load_2d(sa, &tma_a, full, k0, m0);
      }
      if (kOrderB == OperandOrder::kKMajor) {
        tma_load_2d(sb, &tma_b, full, k0, n0);
      } else {
#pragma unroll
        for (int j = 0; j < kBN / 64; ++j)
          tma_load_2d(sb + j * kBoxBytes, &tma_b, full, n0 + 64 * j, k0);
      }
      st.advance();
    }
  }
}

// Issues one stage's wgmma (kKSteps of them, from the stage's A and B tiles at sa and sb) into
// d; fresh: the first of them starts d afresh instead of adding to it.
template <typename T, int kBN, OperandOrder kOrderA, OperandOrder kOrderB>
__device__ __forceinline__ void issue_stage(float (&d)[kBN / 2], std::uint32_t sa, std::uint32_t sb,
                                            bool fresh) {
  constexpr int kTA = kOrderA == OperandOrder::kMNMajor;
  constexpr int kTB = kOrderB == OperandOrder::kMNMajor;
#pragma unroll
  for (int kk = 0; kk < kKSteps; ++kk) {
    const std::uint64_t da = kOrderA == OperandOrder::kMNMajor
                                 ? smem_desc(sa + kk * kMnKStepBytes, kBoxBytes, kAtomBytes)
                                 : smem_desc(sa + kk * kKStepBytes, kUnusedLbo, kAtomBytes);
    const std::uint64_t db = kOrderB == OperandOrder::kKMajor
                                 ? smem_desc(sb + kk * kKStepBytes, kUnusedLbo, kAtomBytes)
                                 : smem_desc(sb + kk * kMnKStepBytes, kBoxBytes, kAtomBytes);
    wgmma_step<kBN, kTA, kTB, T>(d, da, db, fresh && kk == 0 ? 0 : 1);
  }
}

template <int kN>
__device__ __forceinline__ void add_into(float (&acc)[kN], const float (&part)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) acc[i] += part[i];
}

// A consumer warpgroup (c = 0 or 1: rows 64c .. 64c+63 of each tile): for each of the block's
// tiles, wgmma over every k-tile as its stage lands, releasing each stage once the wgmma after it
// have been issued (one group stays in flight), then the epilogue. kPromote: each stage's wgmma
// start a partial sum of their own, which is waited for, added into the tile's accumulators in
// fp32 and its stage released; the other consumer's wgmma keep the tensor cores busy meanwhile.
// (Two partial sums used in turn, so as not to wait, measured no faster on the H100: the wait is
// not what holds this form back; its 128-wide tiles, which load each A tile twice as often, likely
// are.)
template <typename T, int kBN, OperandOrder kOrderA, OperandOrder kOrderB, bool kTmaStore,
          bool kPromote>
__device__ __forceinline__ void consume(
    const CUtensorMap& tma_c, const WgParams& p, int num_tiles, std::uint32_t base,
    const hopper::MbarPipeline<SmemLayout<T, kBN, kTmaStore>::kStages>& pipe, int c) {
  using L = SmemLayout<T, kBN, kTmaStore>;
  hopper::PipelineState<L::kStages> st;
  const float alpha = scaled_alpha(p);
  float acc[kBN / 2];
  [[maybe_unused]] float part[kPromote ? kBN / 2 : 1] = {};
  for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    int tm, tn;
    tile_coords(tile, p, tm, tn);
#pragma unroll
    for (int i = 0; i < kBN / 2; ++i) acc[i] = 0.0f;
    int prev = -1;
    for (int kt = 0; kt < p.k_tiles; ++kt) {
      pipe.consumer_wait(st);
      const std::uint32_t sa = base + st.stage() * L::kStageBytes + c * kBoxBytes,
                          sb = base + st.stage() * L::kStageBytes + L::kABytes;
      hopper::wgmma_fence();
      if constexpr (kPromote) {
        issue_stage<T, kBN, kOrderA, kOrderB>(part, sa, sb, true);
        hopper::wgmma_commit_group();
        hopper::wgmma_wait_group<0>();
        if (threadIdx.x % kWarpgroup == 0) pipe.consumer_release(st.stage());
        add_into(acc, part);
        st.advance();
        continue;
      }
      issue_stage<T, kBN, kOrderA, kOrderB>(acc, sa, sb, false);
      hopper::wgmma_commit_group();
      hopper::wgmma_wait_group<1>();
      if (prev >= 0 && threadIdx.x % kWarpgroup == 0) pipe.consumer_release(prev);
      prev = st.stage();
      st.advance();
    }
    hopper::wgmma_wait_group<0>();
    if (prev >= 0 && threadIdx.x % kWarpgroup == 0) pipe.consumer_release(prev);
    const long long row0 = static_cast<long long>(tm) * kBM + c * 64;
    const long long col0 = static_cast<long long>(tn) * kBN;
    if constexpr (kTmaStore) {
      const std::uint32_t sc = base + L::kCOffset + c * L::kCHalfBytes;
      if (p.out == OutputKind::kF16) {
        store_acc_tma<__half, kBN>(acc, alpha, sc, &tma_c, static_cast<int>(row0),
                                   static_cast<int>(col0), c);
      } else {
        store_acc_tma<__nv_bfloat16, kBN>(acc, alpha, sc, &tma_c, static_cast<int>(row0),
                                          static_cast<int>(col0), c);
      }
    } else if (p.out == OutputKind::kF32) {
      store_acc<float, kBN>(acc, p, alpha, row0, col0);
    } else if (p.out == OutputKind::kF16) {
      store_acc<__half, kBN>(acc, p, alpha, row0, col0);
    } else {
      store_acc<__nv_bfloat16, kBN>(acc, p, alpha, row0, col0);
    }
  }
  if (kTmaStore && threadIdx.x % kWarpgroup == 0) hopper::bulk_wait_group<0>();
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// kOrderA, kOrderB: how A and B are stored (OperandOrder). Warpgroup 0 gives up registers and one
// of its threads produces; warpgroups 1 and 2 take them and consume.
template <typename T, int kBN, OperandOrder kOrderA, OperandOrder kOrderB, bool kTmaStore,
          bool kPromote>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap tma_a,
                      const __grid_constant__ CUtensorMap tma_b,
                      const __grid_constant__ CUtensorMap tma_c, const WgParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = SmemLayout<T, kBN, kTmaStore>;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t base = (smem_u32(smem_raw) + kAtomBytes - 1) & ~(kAtomBytes - 1u);
  const hopper::MbarPipeline<L::kStages> pipe(base + L::kBarOffset);
  const int wg = threadIdx.x / kWarpgroup;
  const int num_tiles = p.tiles_m * p.tiles_n;
  if (threadIdx.x == 0) pipe.init(1, 2);  // full: the producer's arrival; empty: both consumers'
  __syncthreads();
  if (wg == 0) {
    hopper::setmaxnreg_dec<40>();
    if (threadIdx.x == 0)
      produce<T, kBN, kOrderA, kOrderB, kTmaStore>(tma_a, tma_b, p, num_tiles, base, pipe);
  } else {
    hopper::setmaxnreg_inc<232>();
    consume<T, kBN, kOrderA, kOrderB, kTmaStore, kPromote>(tma_c, p, num_tiles, base, pipe, wg - 1);
  }
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2-D row-major matrix (rows x cols, leading dimension ld elements) read in box_cols x box_rows
// boxes with 128-byte swizzle; out-of-range elements read as zero.
bool make_map(CUtensorMap* map, const void* ptr, CUtensorMapDataType type, int elem_bytes,
              long long rows, long long cols, long long ld, int box_cols, int box_rows,
              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * elem_bytes};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  return encode_fn()(map, type, 2, const_cast<void*>(ptr), dims, strides, box, elem,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The current device's SM count (the runtime caches the attribute), asked once per launch: the
// persistent grid and the tile-width choice both depend on it.
cudaError_t sm_count(int* sms) {
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  return cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
}

// The tensor-map type of a 16-bit output.
CUtensorMapDataType out_map_type(DType t) {
  return t == DType::kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
}

template <typename T, int kBN, OperandOrder kOrderA, OperandOrder kOrderB, bool kTmaStore = false,
          bool kPromote = false>
cudaError_t launch_one(const GemmProblem& p, CUtensorMapDataType type, int sms, cudaStream_t stream,
                       const float* scale_a = nullptr, const float* scale_b = nullptr) {
  CUtensorMap ma, mb, mc{};
  constexpr int kE = sizeof(T), kK = kBK<T>;
  const bool ok_a = kOrderA == OperandOrder::kMNMajor
                        ? make_map(&ma, p.a, type, kE, p.k, p.m, p.lda, 64, kK)
                        : make_map(&ma, p.a, type, kE, p.m, p.k, p.lda, kK, kBM);
  const bool ok_b = kOrderB == OperandOrder::kKMajor
                        ? make_map(&mb, p.b, type, kE, p.n, p.k, p.ldb, kK, kBN)
                        : make_map(&mb, p.b, type, kE, p.k, p.n, p.ldb, 64, kK);
  if (!ok_a || !ok_b) return cudaErrorInvalidValue;
  if (kTmaStore && !make_map(&mc, p.c, out_map_type(p.out_type), 2, p.m, p.n, p.ldc, 64, 64)) {
    return cudaErrorInvalidValue;
  }
  WgParams w;
  w.m = p.m;
  w.n = p.n;
  w.k = p.k;
  w.c = p.c;
  w.ldc = p.ldc;
  w.alpha = static_cast<float>(p.alpha);
  w.beta = static_cast<float>(p.beta);
  w.scale_a = scale_a;
  w.scale_b = scale_b;
  w.out = output_kind(p.out_type);
  w.tiles_m = static_cast<int>((p.m + kBM - 1) / kBM);
  w.tiles_n = static_cast<int>((p.n + kBN - 1) / kBN);
  w.k_tiles = static_cast<int>((p.k + kK - 1) / kK);
  auto kernel = wgmma_gemm_kernel<T, kBN, kOrderA, kOrderB, kTmaStore, kPromote>;
  constexpr int bytes = SmemLayout<T, kBN, kTmaStore>::kBytes;
  if (cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess) {
    return e;
  }
  const int tiles = w.tiles_m * w.tiles_n;
  const int grid = tiles < sms ? tiles : sms;  // persistent: at most one block per SM
  kernel<<<grid, kThreads, bytes, stream>>>(ma, mb, mc, w);
  return cudaGetLastError();
}

template <typename T, int kBN, bool kTmaStore>
cudaError_t launch_trans(const GemmProblem& p, CUtensorMapDataType type, int sms,
                         cudaStream_t stream) {
  constexpr OperandOrder kK = OperandOrder::kKMajor, kMN = OperandOrder::kMNMajor;
  if (p.a_trans && p.b_trans) return launch_one<T, kBN, kMN, kK, kTmaStore>(p, type, sms, stream);
  if (p.a_trans) return launch_one<T, kBN, kMN, kMN, kTmaStore>(p, type, sms, stream);
  if (p.b_trans) return launch_one<T, kBN, kK, kK, kTmaStore>(p, type, sms, stream);
  return launch_one<T, kBN, kK, kMN, kTmaStore>(p, type, sms, stream);
}

template <bool kTmaStore>
cudaError_t launch_16bit(const GemmProblem& p, cudaStream_t stream) {
  int sms = 0;
  if (cudaError_t e = sm_count(&sms); e != cudaSuccess) return e;
  // 128x256 tiles unless they would leave more than half of the SMs idle; then 128x128.
  const long long tiles_256 = ((p.m + kBM - 1) / kBM) * ((p.n + 255) / 256);
  const bool narrow = tiles_256 <= sms / 2;
  if (p.in_type == DType::kF16) {
    constexpr auto kF16 = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    return narrow ? launch_trans<__half, 128, kTmaStore>(p, kF16, sms, stream)
                  : launch_trans<__half, 256, kTmaStore>(p, kF16, sms, stream);
  }
  constexpr auto kBF16 = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  return narrow ? launch_trans<__nv_bfloat16, 128, kTmaStore>(p, kBF16, sms, stream)
                : launch_trans<__nv_bfloat16, 256, kTmaStore>(p, kBF16, sms, stream);
}

// fp8: 128x256 tiles (128x128 where 256-wide would leave more than half of the SMs idle) with the
// accumulator as the tensor cores keep it; promoted: 128x128 tiles, whose two accumulator sets fit
// in a consumer's registers.
template <bool kTmaStore>
cudaError_t launch_fp8(const GemmProblem& p, const float* scale_a, const float* scale_b,
                       bool promote, cudaStream_t stream) {
  int sms = 0;
  if (cudaError_t e = sm_count(&sms); e != cudaSuccess) return e;
  using E = __nv_fp8_e4m3;
  constexpr OperandOrder kK = OperandOrder::kKMajor;
  constexpr auto kU8 = CU_TENSOR_MAP_DATA_TYPE_UINT8;
  if (promote) {
    return launch_one<E, 128, kK, kK, kTmaStore, true>(p, kU8, sms, stream, scale_a, scale_b);
  }
  const long long tiles_256 = ((p.m + kBM - 1) / kBM) * ((p.n + 255) / 256);
  if (tiles_256 <= sms / 2) {
    return launch_one<E, 128, kK, kK, kTmaStore>(p, kU8, sms, stream, scale_a, scale_b);
  }
  return launch_one<E, 256, kK, kK, kTmaStore>(p, kU8, sms, stream, scale_a, scale_b);
}

}  // namespace

const char* wgmma_fp8_unsupported(const GemmProblem& p) {
  if (p.in_type != DType::kF8E4M3) return "operands must be e4m3 (quantized before the call)";
  if (p.out_type != DType::kBF16 && p.out_type != DType::kF16 && p.out_type != DType::kF32) {
    return "writes bf16, fp16 or fp32";
  }
  if (p.a_trans || !p.b_trans) {
    return "fp8 wgmma reads K-major operands only: A stored m x k, B stored n x k (transposed)";
  }
  const auto aligned = [](const void* ptr, long long ld) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && ld % 16 == 0;
  };
  if (!aligned(p.a, p.lda) || !aligned(p.b, p.ldb)) {
    return "TMA needs 16-byte aligned operands and rows (leading dimensions divisible by 16)";
  }
  if (p.m > (1ll << 31) || p.n > (1ll << 31) || p.k > (1ll << 31)) return "dimensions below 2^31";
  if (encode_fn() == nullptr) return "the driver offers no cuTensorMapEncodeTiled";
  return nullptr;
}

cudaError_t launch_wgmma_fp8_gemm(const GemmProblem& p, const float* scale_a, const float* scale_b,
                                  bool promote, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (wgmma_fp8_unsupported(p) != nullptr) return cudaErrorInvalidValue;
  const bool tma_store = p.out_type != DType::kF32 && p.beta == 0.0 &&
                         reinterpret_cast<std::uintptr_t>(p.c) % 16 == 0 && p.ldc % 8 == 0;
  return tma_store ? launch_fp8<true>(p, scale_a, scale_b, promote, stream)
                   : launch_fp8<false>(p, scale_a, scale_b, promote, stream);
}

const char* wgmma_gemm_unsupported(const GemmProblem& p) {
  const bool tf32 = p.precision == Precision::kTF32;
  if (tf32) {
    if (p.in_type != DType::kF32 || p.out_type != DType::kF32) return "tf32 takes and writes fp32";
    if (p.a_trans || !p.b_trans) {
      return "tf32 wgmma reads K-major operands only: A k-contiguous (not transposed) and B "
             "k-contiguous (transposed)";
    }
  } else {
    if (p.in_type != DType::kF16 && p.in_type != DType::kBF16)
      return "operands must be fp16 or bf16";
    if (p.out_type != DType::kF32 && p.out_type != p.in_type) {
      return "writes fp32 or the operand type";
    }
  }
  const long long ld_mult = tf32 ? 4 : 8;
  const auto aligned = [&](const void* ptr, long long ld) {
    return reinterpret_cast<std::uintptr_t>(ptr) % 16 == 0 && ld % ld_mult == 0;
  };
  if (!aligned(p.a, p.lda) || !aligned(p.b, p.ldb)) {
    return "TMA needs 16-byte aligned operands and rows (leading dimension divisible by 8 for "
           "16-bit, 4 for fp32)";
  }
  if (p.m > (1ll << 31) || p.n > (1ll << 31) || p.k > (1ll << 31)) return "dimensions below 2^31";
  if (encode_fn() == nullptr) return "the driver offers no cuTensorMapEncodeTiled";
  return nullptr;
}

cudaError_t launch_wgmma_gemm(const GemmProblem& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (wgmma_gemm_unsupported(p) != nullptr) return cudaErrorInvalidValue;
  if (p.precision == Precision::kTF32) {
    int sms = 0;
    if (cudaError_t e = sm_count(&sms); e != cudaSuccess) return e;
    return launch_one<float, 256, OperandOrder::kKMajor, OperandOrder::kKMajor>(
        p, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, sms, stream);
  }
  return launch_16bit<false>(p, stream);
}

const char* wgmma_tma_store_unsupported(const GemmProblem& p) {
  if (const char* why = wgmma_gemm_unsupported(p); why != nullptr) return why;
  if (p.precision == Precision::kTF32 || p.out_type == DType::kF32) {
    return "the TMA-store epilogue writes 16-bit output only (fp16/bf16 out)";
  }
  if (p.beta != 0.0) return "the TMA-store epilogue does not read C (beta must be 0)";
  if (reinterpret_cast<std::uintptr_t>(p.c) % 16 != 0 || p.ldc % 8 != 0) {
    return "the TMA-store epilogue needs a 16-byte aligned C with ldc divisible by 8";
  }
  return nullptr;
}

cudaError_t launch_wgmma_gemm_tma_store(const GemmProblem& p, cudaStream_t stream) {
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  if (wgmma_tma_store_unsupported(p) != nullptr) return cudaErrorInvalidValue;
  return launch_16bit<true>(p, stream);
}

}  // namespace matserve::kernels
