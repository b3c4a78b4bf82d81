// The GEMM benchmark's shapes: square sizes and the thesis's rectangular families (wide, tall,
// random growth, extremely thin), all written m x n x k (C is m x n, the inner dimension k).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace matserve::bench {

struct GemmShape {
  std::string family;  // "square", "wide", "tall", "random", "thin", "custom"
  std::int64_t m = 0, n = 0, k = 0;
  std::string label() const;  // "4096x4096x4096"
};

// Square n x n x n for each size.
std::vector<GemmShape> square_shapes(const std::vector<std::int64_t>& sizes);

// The thesis's families. wide: A w x w/2 times B w/2 x w (m = n = w, k = w/2); tall: A w/2 x w
// times B w x w/2 (m = n = w/2, k = w); random: fixed pseudo-random sizes; thin: the outer- and
// inner-product extremes 8192x64 * 64x8192, 64x8192 * 8192x64, 10000x25 * 25x10000, 25x10000 *
// 10000x25 (A rows x A cols * B rows x B cols).
std::vector<GemmShape> family_shapes(const std::string& family);

// "MxNxK" -> shape of family "custom"; false when malformed.
bool parse_shape(const std::string& text, GemmShape* out);

}  // namespace matserve::bench
