// Results of one gemm_bench run and their three outputs: JSON (every number), a Markdown table
// per precision and shape family (GFLOP/s and share of cuBLAS), and the autotune table.
#pragma once

#include <string>
#include <vector>

#include "bench/gemm_shapes.h"
#include "kernels/autotune.h"

namespace matserve::bench {

struct GemmResult {
  std::string precision;  // "fp32", ...
  GemmShape shape;
  std::string variant;        // registry name, or "auto" for the autotuned choice re-timed
  std::string chosen;         // for "auto": the variant it picked
  std::string status = "ok";  // "ok", "refused: ...", "skipped: ...", "error: ..."
  double median_ms = 0.0;
  double min_ms = 0.0;
  int reps = 0;
  double gflops = 0.0;
  double ratio_to_cublas = 0.0;     // cuBLAS time / this time, same shape and precision; 0 if n/a
  double rel_err_vs_cublas = -1.0;  // ||C - C_cublas|| / ||C_cublas||; -1 if not computed
};

struct GemmBenchRun {
  std::string device;
  std::string date;
  std::string command;
  std::string trans;       // "NN", "TN", ... (a_trans, b_trans)
  double copy_gbps = 0.0;  // device-to-device copy, bytes read + written per second
  std::vector<GemmResult> results;
};

std::string to_json(const GemmBenchRun& run);
std::string to_markdown(const GemmBenchRun& run);

// One entry per measured (precision, shape, variant) that ran and matched cuBLAS; "auto" rows and
// failed ones are left out.
kernels::AutotuneTable to_autotune(const GemmBenchRun& run, double max_rel_err_fp32,
                                   double max_rel_err_fp64);

}  // namespace matserve::bench
