// The canonical transpose every transpose kernel implements: out (cols x rows, row-major) =
// scale * in^T, with in rows x cols row-major. A column-major matrix is the row-major storage of
// its transpose, so it reduces to the same form with rows and cols swapped (see
// canonicalize_transpose). Plain C++ (no CUDA, no absl) so .cu files can include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/types.h"

namespace matserve::kernels {

struct TransposeProblem {
  std::int64_t rows = 0;  // of the input, as stored row-major
  std::int64_t cols = 0;
  const void* in = nullptr;  // in(i, j) = in[i * ld_in + j]
  std::int64_t ld_in = 0;
  void* out = nullptr;  // out(j, i) = out[j * ld_out + i]; may equal `in` for in-place variants
  std::int64_t ld_out = 0;
  DType dtype = DType::kF32;
  double scale = 1.0;
};

// A stored matrix of rows x cols in `layout`, transposed into the same layout.
inline TransposeProblem canonicalize_transpose(std::int64_t rows, std::int64_t cols, Layout layout,
                                               DType dtype, const void* in, void* out,
                                               double scale) {
  TransposeProblem p;
  p.rows = layout == Layout::kRowMajor ? rows : cols;
  p.cols = layout == Layout::kRowMajor ? cols : rows;
  p.in = in;
  p.ld_in = p.cols;
  p.out = out;
  p.ld_out = p.rows;
  p.dtype = dtype;
  p.scale = scale;
  return p;
}

// Bytes read plus bytes written, the figure GB/s uses.
inline double transpose_bytes(const TransposeProblem& p) {
  return 2.0 * static_cast<double>(p.rows) * static_cast<double>(p.cols) *
         static_cast<double>(dtype_size(p.dtype));
}

}  // namespace matserve::kernels
