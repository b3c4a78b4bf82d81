// The autotune table behind the server's `auto` GEMM choice: GFLOP/s per (device, precision,
// shape class, variant), saved as TSV, loaded at start; choose() returns the fastest measured
// variant for a problem's shape class, "cublas" when nothing was measured for it. Rows come from
// gemm_bench (`--autotune-out FILE`, kernel launches timed by the benchmark) or, for precisions
// those do not cover, from the service itself (scripts/bench/autotune_from_service.py over a
// service_vs_torch.py run: what a request through the server measures). Host-only; no CUDA.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/types.h"

namespace matserve::kernels {

// Each dimension falls in a bucket by size: t (<= 32), s (<= 256), m (<= 1536), l (<= 6144),
// h (larger). The class names all three, e.g. "ml_nl_ks" for 4096 x 4096 x 64 (m x n x k).
// Square 2048 and 4096 share "ml_nl_kl"; 8192 x 8192 x 64 and 10000 x 10000 x 25 differ in k.
std::string gemm_shape_class(std::int64_t m, std::int64_t n, std::int64_t k);
// The class of a batch (more than one product) of m x n x k products: "batch_" and the
// product's class. Batches rank apart from single products (a batch of small products fills the
// GPU where one does not); a batch whose class has no rows is ranked by the single product's.
std::string gemm_batch_shape_class(std::int64_t m, std::int64_t n, std::int64_t k);

struct AutotuneEntry {
  std::string device;  // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
  Precision precision = Precision::kF32;
  std::string shape_class;
  std::string variant;
  double gflops = 0.0;
};

class AutotuneTable {
 public:
  // Lines "device<TAB>precision<TAB>shape_class<TAB>variant<TAB>gflops"; '#' starts a comment.
  // Several lines for one (device, precision, class, variant) are averaged.
  static absl::StatusOr<AutotuneTable> parse(std::string_view tsv);
  static absl::StatusOr<AutotuneTable> load(const std::string& path);

  void add(AutotuneEntry e);
  std::string to_tsv() const;
  const std::vector<AutotuneEntry>& entries() const { return entries_; }

  // Every variant measured for (device, precision, shape class), fastest first (mean GFLOP/s
  // over the class's rows; on a tie cuBLAS first: a custom kernel must be measurably faster).
  std::vector<std::string> ranked(std::string_view device, Precision precision,
                                  std::string_view shape_class) const;

  // The fastest measured variant for (device, precision, class of m x n x k) among those
  // `usable` accepts (all when empty); "cublas" when none was measured. Never a variant slower
  // than a measured cuBLAS row of the same class.
  std::string choose(std::string_view device, Precision precision, std::int64_t m, std::int64_t n,
                     std::int64_t k,
                     const std::function<bool(std::string_view)>& usable = {}) const;

 private:
  std::vector<AutotuneEntry> entries_;
};

// Precision from its name ("fp32", ...); InvalidArgument otherwise.
absl::StatusOr<Precision> parse_precision_name(std::string_view name);

}  // namespace matserve::kernels
