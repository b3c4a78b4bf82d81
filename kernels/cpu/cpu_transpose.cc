// CPU out-of-place transpose: see cpu_transpose.h. 32 x 32 blocks keep both the rows read and the
// rows written in cache; scale == 1 copies bits, so the result is exact for every dtype.
#include "kernels/cpu/cpu_transpose.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cpu/element.h"

namespace matserve::kernels {
namespace {

constexpr std::int64_t kBlock = 32;

// Elements are copied through load/store_unaligned: a matrix in a shared-memory region may start
// at any byte offset.
template <typename Bits>
void transpose_bits(const TransposeProblem& p) {
  for (std::int64_t i0 = 0; i0 < p.rows; i0 += kBlock) {
    for (std::int64_t j0 = 0; j0 < p.cols; j0 += kBlock) {
      const std::int64_t i1 = std::min(i0 + kBlock, p.rows);
      const std::int64_t j1 = std::min(j0 + kBlock, p.cols);
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) {
          store_unaligned(p.out, j * p.ld_out + i, load_unaligned<Bits>(p.in, i * p.ld_in + j));
        }
      }
    }
  }
}

void transpose_scaled(const TransposeProblem& p) {
  for (std::int64_t i0 = 0; i0 < p.rows; i0 += kBlock) {
    for (std::int64_t j0 = 0; j0 < p.cols; j0 += kBlock) {
      const std::int64_t i1 = std::min(i0 + kBlock, p.rows);
      const std::int64_t j1 = std::min(j0 + kBlock, p.cols);
      for (std::int64_t i = i0; i < i1; ++i) {
        for (std::int64_t j = j0; j < j1; ++j) {
          // Multiply in the data's own width, as a GPU kernel would (fp32 for 16-bit types).
          const double v = load_element(p.in, p.dtype, i * p.ld_in + j);
          const double scaled =
              p.dtype == DType::kF64
                  ? p.scale * v
                  : static_cast<double>(static_cast<float>(p.scale) * static_cast<float>(v));
          store_element(p.out, p.dtype, j * p.ld_out + i, scaled);
        }
      }
    }
  }
}

}  // namespace

absl::Status cpu_blocked_transpose(const TransposeProblem& p, const ExecContext& /*ctx*/) {
  if (p.scale != 1.0) {
    transpose_scaled(p);
    return absl::OkStatus();
  }
  switch (dtype_size(p.dtype)) {
    case 8: transpose_bits<std::uint64_t>(p); break;
    case 4: transpose_bits<std::uint32_t>(p); break;
    case 2: transpose_bits<std::uint16_t>(p); break;
    default: transpose_bits<std::uint8_t>(p); break;
  }
  return absl::OkStatus();
}

absl::Status cpu_inplace_transpose(const TransposeProblem& p, const ExecContext& ctx) {
  // The transpose of the matrix in a scratch copy, then the copy back over the original.
  const std::size_t bytes = static_cast<std::size_t>(p.rows * p.cols) * dtype_size(p.dtype);
  std::vector<std::byte> scratch(bytes);
  TransposeProblem q = p;
  q.out = scratch.data();
  if (absl::Status s = cpu_blocked_transpose(q, ctx); !s.ok()) return s;
  std::memcpy(p.out, scratch.data(), bytes);
  return absl::OkStatus();
}

}  // namespace matserve::kernels
