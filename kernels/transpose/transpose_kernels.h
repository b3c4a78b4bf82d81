// Launchers of the CUDA transpose kernels (kernels/transpose/*.cu). Each computes the canonical
// TransposeProblem (out = scale * in^T, row-major); the registry wraps them
// (registry_transpose.cc). Plain C++ plus the CUDA runtime types, so both nvcc and the host
// compiler can include it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/transpose_problem.h"

namespace matserve::kernels {

// One element per thread: coalesced reads, strided (uncoalesced) writes. The ladder's baseline.
cudaError_t launch_transpose_naive(const TransposeProblem& p, cudaStream_t stream);

// 32 x 32 shared-memory tile padded to 33 columns, scale fused.
cudaError_t launch_transpose_tiled(const TransposeProblem& p, cudaStream_t stream);

// 16-byte loads and stores, V x V register micro-blocks, swizzled shared-memory tile.
cudaError_t launch_transpose_vectorized(const TransposeProblem& p, cudaStream_t stream);

// The same kernel with its tuning knobs open, for the benchmark's sweep: 1 or 2 tiles per block
// iteration; tiles in row order, diagonal order, as mirrored pairs (I, J) + (J, I) (needs 2
// tiles per block), or in column order (consecutive blocks write neighbouring output segments);
// cache hints on the 16-byte loads / stores (vector_tile.cuh: LoadHint, StoreHint; hinted
// versions exist for scale == 1 only); persistent: one resident wave of blocks looping over the
// tiles instead of one block per tile item. The defaults are the measured best.
inline constexpr int kOrderRow = 0;
inline constexpr int kOrderDiagonal = 1;
inline constexpr int kOrderMirror = 2;
inline constexpr int kOrderCol = 3;
struct VectorizedConfig {
  int tiles_per_block = 1;
  int order = kOrderCol;
  int load_hint = 1;   // 0 plain, 1 ld.global.nc, 2 ld.global.cs
  int store_hint = 1;  // 0 plain, 1 st.global.cs, 2 st.global.cg
  bool persistent = false;
};
inline constexpr VectorizedConfig kVectorizedDefault{};
// Rows off 16-byte alignment (the skewed element path): plain stores. Streaming stores cost 1-2%
// of copy bandwidth there (H100, 8191 x 8193 fp32: 92.8% against 94.6%;
// docs/benchmarks/transpose.md).
inline constexpr VectorizedConfig kVectorizedUnalignedDefault{.store_hint = 0};
cudaError_t launch_transpose_vectorized_tuned(const TransposeProblem& p,
                                              const VectorizedConfig& cfg, cudaStream_t stream);

// The in-place rectangular decomposition (the fallback of launch_transpose_inplace_rect) with its
// strip-batch size open (bytes of scratch a column step fills before it writes back), for the
// benchmark's sweep and the tests; the default is 16 MiB. Always takes the decomposition path.
cudaError_t launch_transpose_inplace_rect_config(const TransposeProblem& p, void* scratch,
                                                 std::size_t scratch_bytes, std::size_t batch_bytes,
                                                 cudaStream_t stream);

// In place, rows == cols, in == out: tile pairs swapped across the diagonal.
cudaError_t launch_transpose_inplace_square(const TransposeProblem& p, cudaStream_t stream);

// In place, any rows x cols, in == out, scratch bounded by `scratch_bytes`. Two paths:
//  - the staged sweep (below, 1.5-2 passes, ~55-62% of copy bandwidth) when the scratch holds the
//    panels of some stage count: transpose_inplace_rect_staged_choose(p, scratch_bytes) > 0;
//  - otherwise the Catanzaro-Keller-Garland decomposition (column rotation, row shuffle, column
//    shuffle; 3-5 passes, ~10-20%), which needs only transpose_inplace_rect_min_scratch(p).
// Through the registry the scratch is the stream's workspace (32 MiB): matrices above ~100 MiB
// take the decomposition. A caller that can lend more (the server, for a resident matrix) should
// allocate transpose_inplace_rect_recommended_scratch(p) bytes and pass them here, and pass the
// workspace as before when that allocation fails.
cudaError_t launch_transpose_inplace_rect(const TransposeProblem& p, void* scratch,
                                          std::size_t scratch_bytes, cudaStream_t stream);

// The scratch to lend launch_transpose_inplace_rect for the staged path at its usual stage count:
// transpose_inplace_rect_staged_scratch(p, 4) (about half the matrix), or 8 / 16 / 2 / 1 stages
// for shapes with too few columns for 4 bands; 0 when the shape needs none (square, vectors) or
// cannot be staged.
std::size_t transpose_inplace_rect_recommended_scratch(const TransposeProblem& p);

// The scratch the in-place rectangular kernel needs at least (one row, one column and its index
// table); 0 when it needs none. Launches with less fail with cudaErrorInvalidValue.
std::size_t transpose_inplace_rect_min_scratch(const TransposeProblem& p);

// Staged sweep (inplace_rect_staged.cu): k stages (1..16) of "save the next row block's live
// columns into scratch panels, gather the next output band". Scratch for k stages (0: the shape
// cannot be cut into k bands): the whole matrix for k = 1, about 1/2 for 2, 3/8 for 8, 5/16 for
// 16. _choose returns the cheapest k whose scratch fits (0: none fits). stages == 0 chooses.
std::size_t transpose_inplace_rect_staged_scratch(const TransposeProblem& p, int stages);
int transpose_inplace_rect_staged_choose(const TransposeProblem& p, std::size_t scratch_bytes);
cudaError_t launch_transpose_inplace_rect_staged(const TransposeProblem& p, void* scratch,
                                                 std::size_t scratch_bytes, int stages,
                                                 cudaStream_t stream);

}  // namespace matserve::kernels
