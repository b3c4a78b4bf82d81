// Product z's matrices in a batched GemmProblem, for kernels that take the batch as blockIdx.z:
// base + z * stride (stride 0 broadcasts one matrix to every product) or the z-th entry of a
// device pointer array. One block reads its pointers once, before its main loop.
#pragma once

#include <cstdint>

#include "kernels/gemm_problem.h"

namespace matserve::kernels::batch {

template <typename T>
__device__ __forceinline__ const T* a_of(const GemmBatch& b, const void* a, long long z) {
  return b.a_array != nullptr ? static_cast<const T*>(b.a_array[z])
                              : static_cast<const T*>(a) + z * b.stride_a;
}

template <typename T>
__device__ __forceinline__ const T* b_of(const GemmBatch& b, const void* bp, long long z) {
  return b.b_array != nullptr ? static_cast<const T*>(b.b_array[z])
                              : static_cast<const T*>(bp) + z * b.stride_b;
}

template <typename T>
__device__ __forceinline__ T* c_of(const GemmBatch& b, void* c, long long z) {
  return b.c_array != nullptr ? static_cast<T*>(b.c_array[z]) : static_cast<T*>(c) + z * b.stride_c;
}

// True when every product's A (or B) start is 16-byte aligned, given product 0's pointer and the
// stride in elements of `elem` bytes (pointer arrays: what the caller checked on the host).
inline bool starts_aligned16(const GemmBatch& b, const void* p0, std::int64_t stride,
                             std::size_t elem) {
  if (b.has_arrays()) return b.arrays_aligned16;
  return reinterpret_cast<std::uintptr_t>(p0) % 16 == 0 &&
         (static_cast<std::uint64_t>(stride) * elem) % 16 == 0;
}

}  // namespace matserve::kernels::batch
