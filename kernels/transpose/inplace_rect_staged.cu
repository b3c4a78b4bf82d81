// In-place rectangular transpose by a staged sweep through a bounded scratch ("save ahead, gather
// behind"). The output rows are cut into k bands; band q occupies the memory of input rows
// [a_q, a_q+1). Stage q saves the still-needed columns of those input rows into scratch panels,
// then one launch gathers output band q (from the panels for rows already saved, straight from
// the matrix for the rest) with the 16-byte tile transpose of vector_tile.cuh, while it saves the
// next row block. Each element moves once, plus about (k + 1) / 2k of them twice (through the
// scratch): 1.5-2 passes over the matrix in k + 1 launches (chained by programmatic dependent
// launch, streaming cache hints as transpose_vectorized), instead of the decomposition's 3-5
// passes (inplace_rect.cu). Scratch: the live panels at the widest stage, about 3/8 of the matrix
// for k = 8, 5/16 for k = 16 (M/2 for k = 2, the whole matrix for k = 1). Panels are reused
// across stages by a host-side greedy slot assignment. Partial edge tiles (thin bands) keep
// 16-byte accesses predicated per chunk; unaligned shapes (4095 x 4097) move elements with
// coalesced accesses through a padded tile (vector_tile.cuh's TileMode) in both jobs, in a separate
// kernel instantiation, so the 16-byte one keeps 44 registers for fp32 (174 with both in one).
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/transpose/transpose_common.cuh"
#include "kernels/transpose/transpose_kernels.h"
#include "kernels/transpose/vector_tile.cuh"

namespace matserve::kernels {
namespace {

using namespace transpose_detail;

constexpr int kMaxStages = 16;

// Everything one shape needs for k stages, computed on the host.
struct StagedPlan {
  int k = 0;
  std::int64_t m = 0, n = 0;
  std::int64_t a[kMaxStages + 1] = {};    // row-block bounds (input rows), multiples of T but a[k]
  std::int64_t b[kMaxStages + 1] = {};    // band bounds (input columns = output rows)
  std::int64_t pw = 0;                    // panel row pitch, elements (multiple of V)
  std::int64_t slot_elems = 0;            // elements per scratch slot (256-byte multiple)
  int slot[kMaxStages][kMaxStages] = {};  // slot of panel (row block I, band Q), Q >= I
  int slots = 0;
  std::int64_t saved = 0;  // elements that go through the scratch
  bool aligned = false;    // 16-byte fast path possible (base pointer checked at launch)
};

bool make_plan(std::int64_t m, std::int64_t n, std::int64_t e, int k, StagedPlan& pl) {
  if (k < 1 || k > kMaxStages || k > n) return false;
  const std::int64_t v = 16 / e, t = 16 * v;
  pl = StagedPlan{};
  pl.k = k;
  pl.m = m;
  pl.n = n;
  const std::int64_t gran = n / k >= t ? t : (n / k >= v ? v : 1);
  for (int q = 0; q <= k; ++q) {
    pl.b[q] = q == k ? n : (q * n / k) / gran * gran;
    if (q > 0 && pl.b[q] <= pl.b[q - 1]) return false;
  }
  // Row block q must hold every input row that starts in output band q's memory (it is saved
  // before band q is written); rounding up to whole tiles saves a few rows early, which is safe.
  std::int64_t widest = 0, tallest = 0;
  for (int q = 0; q <= k; ++q) {
    if (q == k) {
      pl.a[q] = m;
    } else {
      const std::int64_t first = (pl.b[q] * m + n - 1) / n;  // ceil(b_q m / n)
      pl.a[q] = std::min(m, (first + t - 1) / t * t);
    }
    if (q > 0) {
      tallest = std::max(tallest, pl.a[q] - pl.a[q - 1]);
      widest = std::max(widest, pl.b[q] - pl.b[q - 1]);
    }
  }
  pl.pw = (widest + v - 1) / v * v;
  const std::int64_t per256 = 256 / e;
  pl.slot_elems = (tallest * pl.pw + per256 - 1) / per256 * per256;
  // Greedy slot assignment. Launch L saves panels (L, Q >= L) while it gathers band L - 1; the
  // panels (I, L - 1) that gather read are free again from launch L + 1 on.
  int free_list[kMaxStages * kMaxStages];
  int n_free = 0, next = 0;
  for (int launch = 0; launch <= k; ++launch) {
    if (launch >= 2) {  // band launch - 2 was gathered by the previous launch
      for (int i = 0; i <= launch - 2; ++i) {
        if (pl.slot[i][launch - 2] >= 0) free_list[n_free++] = pl.slot[i][launch - 2];
      }
    }
    if (launch < k) {
      const bool empty = pl.a[launch + 1] == pl.a[launch];
      for (int q = launch; q < k; ++q) {
        pl.slot[launch][q] = empty ? -1 : (n_free > 0 ? free_list[--n_free] : next++);
      }
      pl.saved += (pl.a[launch + 1] - pl.a[launch]) * (n - pl.b[launch]);
    }
  }
  pl.slots = next;
  bool aligned = n % v == 0 && m % v == 0;
  for (int q = 0; q <= k; ++q) aligned = aligned && pl.b[q] % v == 0;
  pl.aligned = aligned;
  return true;
}

std::size_t plan_bytes(const StagedPlan& pl, std::int64_t e) {
  return static_cast<std::size_t>(pl.slots) * static_cast<std::size_t>(pl.slot_elems * e);
}

// Estimated time: bytes over a copy-like rate plus a fixed cost per launch (the ramp and tail of
// each dependent kernel: about 5 us measured on the H200, docs/benchmarks/transpose.md). Only the
// ranking matters.
double plan_cost(const StagedPlan& pl, std::int64_t e) {
  const double elems = static_cast<double>(pl.m) * static_cast<double>(pl.n);
  const double bytes = 2.0 * (elems + static_cast<double>(pl.saved)) * static_cast<double>(e);
  return bytes / 2.8e12 + static_cast<double>(pl.k + 1) * 5e-6;
}

constexpr int kStageChoices[] = {1, 2, 3, 4, 6, 8, 12, 16};

// One launch: gather band g (if g >= 0) and save row block s (if s < k).
template <typename Bits>
struct StepArgs {
  Bits* a;
  Bits* scratch;
  std::int64_t m, n, pw, slot_elems;
  std::int64_t bnd_a[kMaxStages + 1];
  std::int64_t bnd_b[kMaxStages + 1];
  bool aligned;
  // gather
  std::int64_t g_c0, g_c1, g_split, g_tiles_r, g_tiles;
  int g_slot[kMaxStages];  // slot of panel (I, g)
  // save
  int s;
  std::int64_t s_r0, s_r1, s_tiles;
  std::int64_t s_prefix[kMaxStages + 1];  // save tiles before band Q, Q from s
  int s_slot[kMaxStages];                 // slot of panel (s, Q)
};

// Aligned (chosen on the host, A.aligned): 16-byte tiles and chunks; otherwise element-wise moves.
template <typename Op, bool Aligned>
__global__ void __launch_bounds__(256)
    staged_kernel(Op op, const __grid_constant__ StepArgs<typename Op::Bits> A) {
  using Bits = typename Op::Bits;
  // Streaming hints, as transpose_vectorized: nothing the gather reads or writes is reused soon.
  using Tile = VecTile<Bits, kLoadCs, kStoreCs>;
  constexpr int T = Tile::T, V = Tile::V;
  extern __shared__ uint4 smem[];
  // Programmatic dependent launch: let the next stage's blocks be scheduled now, and wait here
  // until the previous stage has finished and its writes are visible.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const std::int64_t units = A.g_tiles + A.s_tiles;
  for (std::int64_t u = blockIdx.x; u < units; u += gridDim.x) {
    if (u < A.g_tiles) {
      // Gather: input tile (i0, j0) of band g, written transposed to output rows j0...
      const std::int64_t i0 = (u % A.g_tiles_r) * T;
      const std::int64_t j0 = A.g_c0 + (u / A.g_tiles_r) * T;
      const bool whole = i0 + T <= A.m && j0 + T <= A.g_c1;
      // The source: panel (I, g) for saved rows, else the matrix itself.
      const Bits* src = A.a;
      std::int64_t ld = A.n, rows = A.m, cols = A.g_c1, si = i0, sj = j0;
      if (i0 < A.g_split) {
        int I = 0;
        while (A.bnd_a[I + 1] <= i0) ++I;
        src = A.scratch + A.g_slot[I] * A.slot_elems;
        ld = A.pw;
        rows = A.bnd_a[I + 1] - A.bnd_a[I];
        cols = A.g_c1 - A.g_c0;
        si = i0 - A.bnd_a[I];
        sj = j0 - A.g_c0;
      }
      Tile::template load_tile<Aligned>(src, ld, rows, cols, si, sj, whole, smem);
      __syncthreads();
      Tile::template store_tile<Aligned>(op, smem, A.a, A.m, A.g_c1, A.m, j0, i0, whole);
      __syncthreads();
    } else {
      // Save: a T x T block of row block s, band Q, into its panel (plain copy).
      std::int64_t w = u - A.g_tiles;
      int q = 0;
      while (A.s_prefix[q + 1] <= w) ++q;
      w -= A.s_prefix[q];
      const int band = A.s + q;
      const std::int64_t c_lo = A.bnd_b[band], c_hi = A.bnd_b[band + 1];
      const std::int64_t tiles_c = ceil_div(c_hi - c_lo, T);
      const std::int64_t r0 = A.s_r0 + (w / tiles_c) * T, c0 = c_lo + (w % tiles_c) * T;
      Bits* panel = A.scratch + A.s_slot[q] * A.slot_elems;
      if constexpr (Aligned) {  // 16-byte chunks, predicated at the block's edges
        const int chunk = static_cast<int>(threadIdx.x % 16);
        const int row = static_cast<int>(threadIdx.x / 16);
        const std::int64_t j = c0 + V * chunk;
        const bool col_in = j < c_hi;  // band bounds are multiples of V (pl.aligned)
        const Bits* src = A.a + (r0 + row) * A.n + j;
        Bits* dst = panel + (r0 + row - A.s_r0) * A.pw + (j - c_lo);
        uint4 x[V];
#pragma unroll
        for (int it = 0; it < V; ++it) {
          const std::int64_t i = r0 + row + 16 * it;
          x[it] = make_uint4(0, 0, 0, 0);
          if (i < A.s_r1 && col_in) x[it] = load16<kLoadPlain>(src + 16 * it * A.n);
        }
#pragma unroll
        for (int it = 0; it < V; ++it) {
          const std::int64_t i = r0 + row + 16 * it;
          if (i < A.s_r1 && col_in) store16<kStorePlain>(dst + 16 * it * A.pw, x[it]);
        }
      } else {  // rows not 16-byte aligned: coalesced element copies, a batch in flight
        // (16-bit: 8 in flight; 16 needed 139 registers)
        constexpr int kIters = Tile::kScalarIters,
                      kBatch = sizeof(Bits) == 2 ? 8 : Tile::kScalarBatch;
        constexpr int kStep = Tile::kRowStep;
        const int a0 = static_cast<int>(threadIdx.x) / T, b = static_cast<int>(threadIdx.x) % T;
        const bool col_in = c0 + b < c_hi;
        std::int64_t i = r0 + a0;
        std::int64_t src = i * A.n + c0 + b, dst = (i - A.s_r0) * A.pw + (c0 + b - c_lo);
        const std::int64_t src_step = kStep * A.n, dst_step = kStep * A.pw;
#pragma unroll 1
        for (int b0 = 0; b0 < kIters; b0 += kBatch) {
          Bits x[kBatch];
#pragma unroll
          for (int it = 0; it < kBatch; ++it) {
            x[it] = (col_in && i + it * kStep < A.s_r1) ? A.a[src + it * src_step] : Bits{0};
          }
#pragma unroll
          for (int it = 0; it < kBatch; ++it) {
            if (col_in && i + it * kStep < A.s_r1) panel[dst + it * dst_step] = x[it];
          }
          i += kBatch * kStep;
          src += kBatch * src_step;
          dst += kBatch * dst_step;
        }
      }
    }
  }
}

template <typename Op>
cudaError_t run_staged(Op op, const TransposeProblem& p, const StagedPlan& pl, void* scratch,
                       cudaStream_t stream) {
  using Bits = typename Op::Bits;
  using Tile = VecTile<Bits>;
  constexpr std::int64_t T = Tile::T;
  StepArgs<Bits> A{};
  A.a = static_cast<Bits*>(p.out);
  A.scratch = static_cast<Bits*>(scratch);
  A.m = pl.m;
  A.n = pl.n;
  A.pw = pl.pw;
  A.slot_elems = pl.slot_elems;
  for (int q = 0; q <= pl.k; ++q) {
    A.bnd_a[q] = pl.a[q];
    A.bnd_b[q] = pl.b[q];
  }
  A.aligned = pl.aligned && reinterpret_cast<std::uintptr_t>(p.out) % 16 == 0 &&
              reinterpret_cast<std::uintptr_t>(scratch) % 16 == 0;
  for (int launch = 0; launch <= pl.k; ++launch) {
    const int g = launch - 1, s = launch;
    A.g_tiles = 0;
    if (g >= 0) {
      A.g_c0 = pl.b[g];
      A.g_c1 = pl.b[g + 1];
      A.g_split = pl.a[g + 1];
      A.g_tiles_r = ceil_div(pl.m, T);
      A.g_tiles = A.g_tiles_r * ceil_div(A.g_c1 - A.g_c0, T);
      for (int i = 0; i <= g; ++i) A.g_slot[i] = pl.slot[i][g];
    }
    A.s_tiles = 0;
    A.s = s;
    if (s < pl.k) {
      A.s_r0 = pl.a[s];
      A.s_r1 = pl.a[s + 1];
      const std::int64_t tiles_r = ceil_div(A.s_r1 - A.s_r0, T);
      A.s_prefix[0] = 0;
      for (int q = s; q < pl.k; ++q) {
        A.s_slot[q - s] = pl.slot[s][q];
        A.s_prefix[q - s + 1] = A.s_prefix[q - s] + tiles_r * ceil_div(pl.b[q + 1] - pl.b[q], T);
      }
      for (int q = pl.k - s + 1; q <= kMaxStages; ++q) A.s_prefix[q] = A.s_prefix[pl.k - s];
      A.s_tiles = A.s_prefix[pl.k - s];
    }
    const std::int64_t units = A.g_tiles + A.s_tiles;
    if (units == 0) continue;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid_for(units));
    cfg.blockDim = dim3(Tile::kThreads);
    cfg.dynamicSmemBytes = Tile::kSmemBytes;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const cudaError_t e = A.aligned ? cudaLaunchKernelEx(&cfg, staged_kernel<Op, true>, op, A)
                                    : cudaLaunchKernelEx(&cfg, staged_kernel<Op, false>, op, A);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

bool plan_for(const TransposeProblem& p, int stages, StagedPlan& pl) {
  return make_plan(p.rows, p.cols, static_cast<std::int64_t>(dtype_size(p.dtype)), stages, pl);
}

}  // namespace

std::size_t transpose_inplace_rect_staged_scratch(const TransposeProblem& p, int stages) {
  StagedPlan pl;
  if (!plan_for(p, stages, pl)) return 0;
  return plan_bytes(pl, static_cast<std::int64_t>(dtype_size(p.dtype)));
}

int transpose_inplace_rect_staged_choose(const TransposeProblem& p, std::size_t scratch_bytes) {
  const auto e = static_cast<std::int64_t>(dtype_size(p.dtype));
  int best = 0;
  double best_cost = 0;
  for (int k : kStageChoices) {
    StagedPlan pl;
    if (!plan_for(p, k, pl) || plan_bytes(pl, e) > scratch_bytes) continue;
    const double c = plan_cost(pl, e);
    if (best == 0 || c < best_cost) {
      best = k;
      best_cost = c;
    }
  }
  return best;
}

cudaError_t launch_transpose_inplace_rect_staged(const TransposeProblem& p, void* scratch,
                                                 std::size_t scratch_bytes, int stages,
                                                 cudaStream_t stream) {
  if (p.in != p.out || p.ld_in != p.cols || p.ld_out != p.rows) return cudaErrorInvalidValue;
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  if (p.rows >= (std::int64_t{1} << 31) || p.cols >= (std::int64_t{1} << 31)) {
    return cudaErrorInvalidValue;
  }
  if (stages == 0) stages = transpose_inplace_rect_staged_choose(p, scratch_bytes);
  StagedPlan pl;
  if (stages == 0 || !plan_for(p, stages, pl)) return cudaErrorInvalidValue;
  if (scratch == nullptr ||
      plan_bytes(pl, static_cast<std::int64_t>(dtype_size(p.dtype))) > scratch_bytes) {
    return cudaErrorInvalidValue;
  }
  return dispatch_op(p, [&](auto op) { return run_staged(op, p, pl, scratch, stream); });
}

}  // namespace matserve::kernels
