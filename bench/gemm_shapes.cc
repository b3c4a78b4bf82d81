// The GEMM benchmark's shapes; see gemm_shapes.h.
#include "bench/gemm_shapes.h"

#include <cstdio>

namespace matserve::bench {

std::string GemmShape::label() const {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

std::vector<GemmShape> square_shapes(const std::vector<std::int64_t>& sizes) {
  std::vector<GemmShape> out;
  for (std::int64_t s : sizes) out.push_back({"square", s, s, s});
  return out;
}

std::vector<GemmShape> family_shapes(const std::string& family) {
  std::vector<GemmShape> out;
  if (family == "wide") {
    for (std::int64_t w : {1300, 2500, 5000}) out.push_back({family, w, w, w / 2});
  } else if (family == "tall") {
    for (std::int64_t w : {1300, 2500, 5000}) out.push_back({family, w / 2, w / 2, w});
  } else if (family == "random") {
    // Drawn once (uniform 100..6000 per dimension) and fixed, so runs compare.
    out.push_back({family, 1537, 3001, 777});
    out.push_back({family, 4211, 987, 2650});
    out.push_back({family, 2999, 5003, 4099});
  } else if (family == "thin") {
    out.push_back({family, 8192, 8192, 64});
    out.push_back({family, 64, 64, 8192});
    out.push_back({family, 10000, 10000, 25});
    out.push_back({family, 25, 25, 10000});
  }
  return out;
}

bool parse_shape(const std::string& text, GemmShape* out) {
  long long m = 0, n = 0, k = 0;
  char tail = 0;
  if (std::sscanf(text.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3) return false;
  if (m < 1 || n < 1 || k < 1) return false;
  *out = GemmShape{"custom", m, n, k};
  return true;
}

}  // namespace matserve::bench
