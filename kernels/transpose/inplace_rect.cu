// In-place transpose of any rows x cols matrix. With scratch for it (a fraction of the matrix, at
// most the whole of it for small ones), the staged sweep of inplace_rect_staged.cu (1.5-2 passes);
// otherwise the fallback here, the decomposition of Catanzaro, Keller and Garland (PPoPP 2014):
// with c = gcd(m, n), a = m / c, b = n / c, the permutation splits into (1) rotate column j by
// floor(j / b) (only when c > 1), (2) permute each row, (3) permute each column, where (3) = rotate
// column s by s, then move whole rows (r -> p(r)). Rows are permuted in shared memory; column steps
// go through a bounded scratch in column strips (a band in shared memory turns each column rotation
// into coalesced row segments). Scratch: one strip batch plus index tables of b and m entries, far
// below the matrix, unlike out-of-place. Cycle-following is not used: its scattered single-element
// moves are why published GPU in-place kernels reach 10-25%. Cost: 3 passes over the matrix (5 when
// c > 1); measured 13-22% of copy bandwidth on the H100 (docs/benchmarks/transpose.md), each pass
// at about 70% of copy.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/transpose/transpose_common.cuh"
#include "kernels/transpose/transpose_kernels.h"

namespace matserve::kernels {
namespace {

using namespace transpose_detail;

// Everything the three steps need about the shape, precomputed on the host.
struct Plan {
  std::int64_t m = 0, n = 0;  // input rows, cols
  std::int64_t c = 1, a = 1, b = 1;
  FastDiv div_c, div_b, div_n;
};

std::int64_t gcd64(std::int64_t x, std::int64_t y) {
  while (y != 0) {
    const std::int64_t t = x % y;
    x = y;
    y = t;
  }
  return x;
}

// x^-1 mod b for gcd(x, b) == 1 (0 when b == 1).
std::int64_t mod_inverse(std::int64_t x, std::int64_t b) {
  if (b == 1) return 0;
  std::int64_t r0 = b, r1 = x % b, t0 = 0, t1 = 1;
  while (r1 != 0) {
    const std::int64_t q = r0 / r1;
    std::int64_t tmp = r0 - q * r1;
    r0 = r1;
    r1 = tmp;
    tmp = t0 - q * t1;
    t0 = t1;
    t1 = tmp;
  }
  return t0 < 0 ? t0 + b : t0;
}

// table[u] = u * a^-1 mod b: the row shuffle's only product that needs 64 bits.
__global__ void inverse_table_kernel(std::uint32_t* table, std::int64_t b, std::int64_t ainv) {
  for (std::int64_t u = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; u < b;
       u += std::int64_t{gridDim.x} * blockDim.x) {
    table[u] = static_cast<std::uint32_t>((static_cast<std::uint64_t>(u) * ainv) % b);
  }
}

// Column the element that lands at (i, s) comes from, in the row shuffle (step 2).
__device__ __forceinline__ std::uint32_t row_source(const Plan& pl, const std::uint32_t* table,
                                                    std::uint32_t i, std::uint32_t i_mod_c,
                                                    std::uint32_t s) {
  const std::uint32_t u = pl.div_c.div(s);
  const std::uint32_t v = s - u * pl.div_c.d;
  const std::uint32_t q = v >= i_mod_c ? v - i_mod_c : v + pl.div_c.d - i_mod_c;
  std::uint32_t x = i + q;
  if (x >= static_cast<std::uint32_t>(pl.m)) x -= static_cast<std::uint32_t>(pl.m);
  const std::uint32_t x1b = pl.div_b.mod(pl.div_c.div(x));
  const std::uint32_t w = u >= x1b ? u - x1b : u + pl.div_b.d - x1b;
  return q * pl.div_b.d + table[w];
}

// Step 2: rows [i0, i0 + R) are contiguous; stage them in shared memory (8 loads in flight per
// thread), then gather.
constexpr int kUnroll = 8;

template <typename Op>
__global__ void __launch_bounds__(256)
    row_shuffle_kernel(Op op, typename Op::Bits* a, Plan pl, const std::uint32_t* table,
                       std::int64_t rows_per_block) {
  using Bits = typename Op::Bits;
  extern __shared__ uint4 smem_raw[];
  Bits* buf = reinterpret_cast<Bits*>(smem_raw);
  const std::int64_t groups = ceil_div(pl.m, rows_per_block);
  const int nt = blockDim.x;
  for (std::int64_t g = blockIdx.x; g < groups; g += gridDim.x) {
    const std::int64_t i0 = g * rows_per_block;
    const auto count = static_cast<std::uint32_t>(min(rows_per_block, pl.m - i0) * pl.n);
    Bits* base = a + i0 * pl.n;
    for (std::uint32_t e0 = threadIdx.x; e0 < count; e0 += kUnroll * nt) {
      Bits v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::uint32_t e = e0 + u * nt;
        if (e < count) v[u] = base[e];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const std::uint32_t e = e0 + u * nt;
        if (e < count) buf[e] = v[u];
      }
    }
    __syncthreads();
    for (std::uint32_t e = threadIdx.x; e < count; e += nt) {
      const std::uint32_t r = pl.div_n.div(e);
      const std::uint32_t s = e - r * pl.div_n.d;
      const std::uint32_t i = static_cast<std::uint32_t>(i0) + r;
      base[e] = op(buf[std::int64_t{r} * pl.n + row_source(pl, table, i, pl.div_c.mod(i), s)]);
    }
    __syncthreads();
  }
}

// Step 2 from global scratch (rows too long for shared memory, or too few rows to fill the
// GPU one block per row group): rows [i0, i0 + nrows) were copied to `scratch`.
template <typename Op>
__global__ void __launch_bounds__(256)
    row_shuffle_global_kernel(Op op, typename Op::Bits* __restrict__ a,
                              const typename Op::Bits* __restrict__ scratch, Plan pl,
                              const std::uint32_t* __restrict__ table, std::int64_t i0,
                              std::uint32_t count) {
  for (std::uint32_t e = blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += gridDim.x * blockDim.x) {
    const std::uint32_t r = pl.div_n.div(e);
    const std::uint32_t s = e - r * pl.div_n.d;
    const std::uint32_t i = static_cast<std::uint32_t>(i0) + r;
    a[i0 * pl.n + e] =
        op(scratch[std::int64_t{r} * pl.n + row_source(pl, table, i, pl.div_c.mod(i), s)]);
  }
}

// Column steps, pass A: scratch[k][s - s0] = a[(k + amount(s)) mod m][s] for the strip batch
// [s0, s0 + wb); amount(s) = s / b (step 1) or s (step 3). A 32 x 32 block of scratch needs a
// band of at most 63 source rows: loaded by rows into shared memory, read back along skewed
// columns (row stride 32 elements: each thread stays in its own bank column).
constexpr int kStrip = 32;

template <typename Bits, bool kSlopeOne>
__global__ void __launch_bounds__(kStrip * 8)
    skew_to_scratch_kernel(const Bits* a, Bits* scratch, Plan pl, std::int64_t s0,
                           std::int64_t wb) {
  __shared__ Bits band[2 * kStrip][kStrip];
  const std::int64_t tiles_k = ceil_div(pl.m, kStrip);
  const std::int64_t tiles = tiles_k * ceil_div(wb, kStrip);
  const int tx = threadIdx.x;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const std::int64_t k0 = (t % tiles_k) * kStrip;
    const std::int64_t sf = s0 + (t / tiles_k) * kStrip;
    const std::int64_t sl = min(sf + kStrip, s0 + wb) - 1;
    auto amount = [&](std::int64_t s) -> std::int64_t {
      return kSlopeOne ? s : static_cast<std::int64_t>(pl.div_b.div(static_cast<std::uint32_t>(s)));
    };
    const std::int64_t base = amount(sf);
    const int span = static_cast<int>(amount(sl) - base);  // <= 31
    const std::int64_t first = (k0 + base) % pl.m;
    const std::int64_t s = sf + tx;
    Bits v[2 * kStrip / 8];
#pragma unroll
    for (int u = 0; u < 2 * kStrip / 8; ++u) {  // all band loads in flight before the stores
      const int y = threadIdx.y + 8 * u;
      std::int64_t row = first + y;
      while (row >= pl.m) row -= pl.m;
      if (y < kStrip + span && s <= sl) v[u] = a[row * pl.n + s];
    }
#pragma unroll
    for (int u = 0; u < 2 * kStrip / 8; ++u) {
      const int y = threadIdx.y + 8 * u;
      if (y < kStrip + span && s <= sl) band[y][tx] = v[u];
    }
    __syncthreads();
    if (s <= sl) {
      const int d = static_cast<int>(amount(s) - base);
      for (int y = threadIdx.y; y < kStrip; y += blockDim.y) {
        const std::int64_t k = k0 + y;
        if (k < pl.m) scratch[k * wb + (s - s0)] = band[y + d][tx];
      }
    }
    __syncthreads();
  }
}

// Column steps, pass B: a[r][s0 + x] = scratch[row_of(r)][x], with row_of the identity (step 1)
// or p(r) = (r n - floor(r / a)) mod m (step 3, from a table): whole-row moves, coalesced.
__global__ void row_map_kernel(std::uint32_t* p_table, std::int64_t m, std::int64_t n,
                               std::int64_t a) {
  for (std::int64_t r = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; r < m;
       r += std::int64_t{gridDim.x} * blockDim.x) {
    const auto rn =
        static_cast<std::int64_t>((static_cast<std::uint64_t>(r) * static_cast<std::uint64_t>(n)) %
                                  static_cast<std::uint64_t>(m));
    std::int64_t src = rn - (r / a) % m;
    if (src < 0) src += m;
    p_table[r] = static_cast<std::uint32_t>(src);
  }
}

template <typename Bits, bool kPermute>
__global__ void __launch_bounds__(256)
    scratch_to_rows_kernel(Bits* __restrict__ a, const Bits* __restrict__ scratch, Plan pl,
                           const std::uint32_t* __restrict__ p_table, std::int64_t s0,
                           FastDiv div_w, std::uint32_t count) {
  const std::uint32_t stride = gridDim.x * blockDim.x;
  for (std::uint32_t e0 = blockIdx.x * blockDim.x + threadIdx.x; e0 < count;
       e0 += kUnroll * stride) {
    Bits v[kUnroll];
    std::int64_t dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const std::uint32_t e = e0 + u * stride;
      if (e < count) {
        const std::uint32_t r = div_w.div(e);
        const std::uint32_t x = e - r * div_w.d;
        const std::uint32_t src = kPermute ? p_table[r] : r;
        v[u] = scratch[std::int64_t{src} * div_w.d + x];
        dst[u] = std::int64_t{r} * pl.n + s0 + x;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (e0 + u * stride < count) a[dst[u]] = v[u];
    }
  }
}

// Elementwise scale for the shapes whose transpose is the identity on memory (1 x n, m x 1).
template <typename Op>
__global__ void scale_kernel(Op op, typename Op::Bits* a, std::int64_t count) {
  for (std::int64_t e = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; e < count;
       e += std::int64_t{gridDim.x} * blockDim.x) {
    a[e] = op(a[e]);
  }
}

constexpr std::size_t kTableAlign = 256;
// Scratch filled per column-step batch. Measured on the H100 (4, 8, 16, 32 MiB): smaller batches,
// which might stay in L2 between the two passes, were slower (more launches); 16 and 32 tie.
constexpr std::size_t kBatchTargetBytes = std::size_t{16} << 20;

std::size_t table_bytes(std::int64_t b) {
  return (static_cast<std::size_t>(b) * 4 + kTableAlign - 1) / kTableAlign * kTableAlign;
}

int max_smem_optin() {
  static const int v = [] {
    int dev = 0, bytes = 48 << 10;
    if (cudaGetDevice(&dev) == cudaSuccess) {
      cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    }
    return bytes;
  }();
  return v;
}

template <typename Op>
cudaError_t run_decomposition(Op op, const TransposeProblem& p, void* scratch,
                              std::size_t scratch_bytes, std::size_t batch_bytes,
                              cudaStream_t stream) {
  using Bits = typename Op::Bits;
  constexpr std::int64_t E = sizeof(Bits);
  Bits* a = static_cast<Bits*>(p.out);
  Plan pl;
  pl.m = p.rows;
  pl.n = p.cols;
  pl.c = gcd64(pl.m, pl.n);
  pl.a = pl.m / pl.c;
  pl.b = pl.n / pl.c;
  pl.div_c = FastDiv(static_cast<std::uint32_t>(pl.c));
  pl.div_b = FastDiv(static_cast<std::uint32_t>(pl.b));
  pl.div_n = FastDiv(static_cast<std::uint32_t>(pl.n));

  auto* table = static_cast<std::uint32_t*>(scratch);
  auto* p_table = reinterpret_cast<std::uint32_t*>(static_cast<char*>(scratch) + table_bytes(pl.b));
  const std::size_t tables = table_bytes(pl.b) + table_bytes(pl.m);
  Bits* buf = reinterpret_cast<Bits*>(static_cast<char*>(scratch) + tables);
  const std::size_t buf_bytes = scratch_bytes - tables;
  inverse_table_kernel<<<grid_for(ceil_div(pl.b, 256), 1024), 256, 0, stream>>>(
      table, pl.b, mod_inverse(pl.a % pl.b, pl.b));
  row_map_kernel<<<grid_for(ceil_div(pl.m, 256), 1024), 256, 0, stream>>>(p_table, pl.m, pl.n,
                                                                          pl.a);

  // Column steps, batch by batch of whole columns.
  const std::int64_t col_bytes = pl.m * E;
  std::int64_t wb = static_cast<std::int64_t>(std::min(buf_bytes, batch_bytes)) / col_bytes;
  wb = std::max<std::int64_t>(1, std::min(wb, pl.n));
  if (wb >= kStrip) wb -= wb % kStrip;
  auto column_step = [&](auto slope_one, auto permute) {
    for (std::int64_t s0 = 0; s0 < pl.n; s0 += wb) {
      const std::int64_t w = std::min(wb, pl.n - s0);
      const std::int64_t tiles = ceil_div(pl.m, kStrip) * ceil_div(w, kStrip);
      skew_to_scratch_kernel<Bits, decltype(slope_one)::value>
          <<<grid_for(tiles), dim3(kStrip, 8), 0, stream>>>(a, buf, pl, s0, w);
      const auto count = static_cast<std::uint32_t>(pl.m * w);
      scratch_to_rows_kernel<Bits, decltype(permute)::value>
          <<<grid_for(ceil_div(count, 256 * kUnroll), 1 << 16), 256, 0, stream>>>(
              a, buf, pl, p_table, s0, FastDiv(static_cast<std::uint32_t>(w)), count);
    }
  };
  if (pl.c > 1) column_step(std::false_type{}, std::false_type{});  // step 1

  // Step 2: row shuffle, in shared memory when a row fits and there are enough row groups to
  // fill the GPU; otherwise through the scratch (copy a batch of rows, gather from it).
  const std::int64_t row_bytes = pl.n * E;
  const std::int64_t smem_cap = max_smem_optin();
  std::int64_t rpb = std::max<std::int64_t>(
      1, std::min<std::int64_t>((4096 + pl.n - 1) / pl.n,
                                smem_cap / std::max<std::int64_t>(row_bytes, 1)));
  rpb = std::min(rpb, pl.m);
  if (row_bytes <= smem_cap && ceil_div(pl.m, rpb) >= 256) {
    const std::size_t smem = static_cast<std::size_t>(rpb * row_bytes);
    static const cudaError_t attr =
        cudaFuncSetAttribute(row_shuffle_kernel<Op>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(smem_cap));
    if (attr != cudaSuccess) return attr;
    row_shuffle_kernel<Op>
        <<<grid_for(ceil_div(pl.m, rpb)), 256, smem, stream>>>(op, a, pl, table, rpb);
  } else {
    const std::int64_t rb = std::max<std::int64_t>(
        1, static_cast<std::int64_t>(std::min(buf_bytes, batch_bytes)) / row_bytes);
    for (std::int64_t i0 = 0; i0 < pl.m; i0 += rb) {
      const std::int64_t nr = std::min(rb, pl.m - i0);
      cudaError_t e = cudaMemcpyAsync(buf, a + i0 * pl.n, static_cast<std::size_t>(nr * row_bytes),
                                      cudaMemcpyDeviceToDevice, stream);
      if (e != cudaSuccess) return e;
      const auto count = static_cast<std::uint32_t>(nr * pl.n);
      row_shuffle_global_kernel<Op><<<grid_for(ceil_div(count, 256), 1 << 16), 256, 0, stream>>>(
          op, a, buf, pl, table, i0, count);
    }
  }

  column_step(std::true_type{}, std::true_type{});  // step 3
  return cudaGetLastError();
}

}  // namespace

std::size_t transpose_inplace_rect_min_scratch(const TransposeProblem& p) {
  if (p.rows <= 1 || p.cols <= 1 || p.rows == p.cols) return 0;
  const std::int64_t b = p.cols / gcd64(p.rows, p.cols);
  const auto e = static_cast<std::int64_t>(dtype_size(p.dtype));
  return table_bytes(b) + table_bytes(p.rows) +
         static_cast<std::size_t>(std::max(p.rows, p.cols) * e);
}

std::size_t transpose_inplace_rect_recommended_scratch(const TransposeProblem& p) {
  if (p.rows <= 1 || p.cols <= 1 || p.rows == p.cols) return 0;
  for (int k : {4, 8, 16, 2, 1}) {
    if (const std::size_t b = transpose_inplace_rect_staged_scratch(p, k); b > 0) return b;
  }
  return 0;
}

cudaError_t launch_transpose_inplace_rect(const TransposeProblem& p, void* scratch,
                                          std::size_t scratch_bytes, cudaStream_t stream) {
  if (p.in == p.out && p.ld_in == p.cols && p.ld_out == p.rows && p.rows > 1 && p.cols > 1 &&
      p.rows != p.cols && scratch != nullptr) {
    if (const int k = transpose_inplace_rect_staged_choose(p, scratch_bytes); k > 0) {
      return launch_transpose_inplace_rect_staged(p, scratch, scratch_bytes, k, stream);
    }
  }
  return launch_transpose_inplace_rect_config(p, scratch, scratch_bytes, kBatchTargetBytes, stream);
}

cudaError_t launch_transpose_inplace_rect_config(const TransposeProblem& p, void* scratch,
                                                 std::size_t scratch_bytes, std::size_t batch_bytes,
                                                 cudaStream_t stream) {
  if (p.in != p.out || p.ld_in != p.cols || p.ld_out != p.rows) return cudaErrorInvalidValue;
  if (p.rows <= 0 || p.cols <= 0) return cudaSuccess;
  if (p.rows >= (std::int64_t{1} << 31) || p.cols >= (std::int64_t{1} << 31)) {
    return cudaErrorInvalidValue;  // the index math is 32-bit within a row or a column
  }
  if (p.rows == p.cols) return launch_transpose_inplace_square(p, stream);
  if (p.rows == 1 || p.cols == 1) {  // a vector: the memory layout does not change
    if (p.scale == 1.0) return cudaSuccess;
    return transpose_detail::dispatch_op(p, [&](auto op) {
      using Op = decltype(op);
      const std::int64_t count = p.rows * p.cols;
      scale_kernel<Op><<<grid_for(ceil_div(count, 256), 4096), 256, 0, stream>>>(
          op, static_cast<typename Op::Bits*>(p.out), count);
      return cudaGetLastError();
    });
  }
  if (scratch == nullptr || scratch_bytes < transpose_inplace_rect_min_scratch(p)) {
    return cudaErrorInvalidValue;
  }
  return transpose_detail::dispatch_op(p, [&](auto op) {
    return run_decomposition(op, p, scratch, scratch_bytes, batch_bytes, stream);
  });
}

}  // namespace matserve::kernels
