// cp.async (sm_80+) global -> shared copies and their group fences, shared by the kernels that
// stage tiles asynchronously (mma_sync, dmma, the pipelined SIMT rungs). The src-size operand
// zero-fills the rest of a copy: bytes past the matrix edge arrive as zeros without being read.
#pragma once

#include <cstdint>

namespace matserve::kernels::async_copy {

// The 32-bit shared-memory address PTX's shared-state-space instructions take.
__device__ __forceinline__ std::uint32_t smem_u32(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Copies the 16 bytes at src to dst; both 16-byte aligned. Bypasses L1 (.cg).
__device__ __forceinline__ void copy16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src));
}

// The same for the first src_bytes (0..16) of them, zero-filling the rest; src is not read when
// src_bytes is 0.
__device__ __forceinline__ void copy16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes));
}

// One 4- or 8-byte element, or zero when src_bytes is 0 (src is then not read).
template <int kBytes>
__device__ __forceinline__ void copy_elem(void* dst, const void* src, int src_bytes) {
  static_assert(kBytes == 4 || kBytes == 8, "cp.async.ca copies 4, 8 or 16 bytes");
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem_u32(dst)), "l"(src),
               "n"(kBytes), "r"(src_bytes));
}

__device__ __forceinline__ void commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

}  // namespace matserve::kernels::async_copy

namespace matserve::kernels::async_copy {

// The multistage main loop of a block that stages k-tiles in a ring of kStages shared buffers:
// load_stage(stage, kt) issues the cp.async copies of k-tile kt into buffer `stage`, and
// compute(stage, kt) consumes it. kStages - 1 tiles are in flight while one is computed; one
// barrier per tile makes a buffer's copies visible to the block and keeps it from being refilled
// while any warp still reads it. All copies have landed when it returns.
template <int kStages, typename LoadStage, typename Compute>
__device__ __forceinline__ void multistage_mainloop(int k_tiles, LoadStage&& load_stage,
                                                    Compute&& compute) {
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    commit();
    compute(kt % kStages, kt);
  }
  wait<0>();
}

}  // namespace matserve::kernels::async_copy
