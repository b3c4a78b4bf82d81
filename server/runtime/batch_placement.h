// Where the products of a batch keep their matrices, as the kernels take it: strides when every
// product's A (and B, and C) sits at one fixed distance from the one before (0 included: one
// matrix for every product), else pointer arrays. Shared by the CUDA and CPU backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/gemm_problem.h"

namespace matserve::server {

// Product i's operand and result pointers (device memory on the CUDA backend).
struct ProductPointers {
  std::vector<const void*> a;
  std::vector<const void*> b;
  std::vector<void*> c;
};

namespace batch_detail {

// The distance in elements between consecutive pointers when it is constant and a whole number
// of elements (0 for one pointer, or the same one repeated); nullopt otherwise.
template <typename P>
std::optional<std::int64_t> constant_stride(const std::vector<P>& ptrs, std::size_t elem) {
  if (ptrs.size() < 2) return 0;
  const auto at = [&](std::size_t i) {
    return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(ptrs[i]));
  };
  const std::int64_t step = at(1) - at(0);
  if (step < 0 || step % static_cast<std::int64_t>(elem) != 0) return std::nullopt;
  for (std::size_t i = 2; i < ptrs.size(); ++i) {
    if (at(i) - at(i - 1) != step) return std::nullopt;
  }
  return step / static_cast<std::int64_t>(elem);
}

}  // namespace batch_detail

// The strided placement of `ptrs` (count products), or nullopt when some operand's matrices are
// not evenly spaced: the caller then passes pointer arrays (pointer_arrays below).
inline std::optional<kernels::GemmBatch> strided_batch(const ProductPointers& ptrs,
                                                       std::size_t in_elem, std::size_t out_elem) {
  const auto sa = batch_detail::constant_stride(ptrs.a, in_elem);
  const auto sb = batch_detail::constant_stride(ptrs.b, in_elem);
  const auto sc = batch_detail::constant_stride(ptrs.c, out_elem);
  // Distinct products must write distinct results.
  if (!sa || !sb || !sc || (ptrs.c.size() > 1 && *sc == 0)) return std::nullopt;
  kernels::GemmBatch b;
  b.count = static_cast<std::int64_t>(ptrs.c.size());
  b.stride_a = *sa;
  b.stride_b = *sb;
  b.stride_c = *sc;
  return b;
}

// The 3 * count pointers of a pointer-array placement, A's then B's then C's: what the caller
// copies to memory the kernel can read, and the batch that names them there.
struct PointerArrays {
  std::vector<const void*> host;
  bool aligned16 = true;  // every pointer on 16 bytes (the kernels may then load vectors)

  kernels::GemmBatch placed_at(void* where) const {
    const std::size_t n = host.size() / 3;
    auto* base = static_cast<void**>(where);
    kernels::GemmBatch b;
    b.count = static_cast<std::int64_t>(n);
    b.a_array = const_cast<const void* const*>(base);
    b.b_array = const_cast<const void* const*>(base + n);
    b.c_array = base + 2 * n;
    b.arrays_aligned16 = aligned16;
    b.host_a_array = host.data();
    b.host_b_array = host.data() + n;
    b.host_c_array = const_cast<void* const*>(host.data() + 2 * n);
    return b;
  }
};

inline PointerArrays pointer_arrays(const ProductPointers& ptrs) {
  PointerArrays out;
  const std::size_t n = ptrs.c.size();
  out.host.reserve(3 * n);
  for (std::size_t i = 0; i < n; ++i) out.host.push_back(ptrs.a[ptrs.a.size() == 1 ? 0 : i]);
  for (std::size_t i = 0; i < n; ++i) out.host.push_back(ptrs.b[ptrs.b.size() == 1 ? 0 : i]);
  for (std::size_t i = 0; i < n; ++i) out.host.push_back(ptrs.c[i]);
  for (const void* p : out.host) {
    out.aligned16 = out.aligned16 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  }
  return out;
}

}  // namespace matserve::server
