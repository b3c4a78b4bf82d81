// fp64_peak: how far the fp64 CUDA-core target of the kernel ladder (best fp64 CUDA-core variant
// >= 50% of cuBLAS DGEMM) sits from what the CUDA cores can do at all. In one run it
// measures:
//   ceilings    - the fp64 rates of the CUDA cores with no global memory work (fp64_ceilings.h):
//                 DFMA with constant-bank operands (the datasheet rate), DFMA with register
//                 operands (what a GEMM's DFMAs read), and simt_tuned's inner loop alone;
//   cublas      - cuBLAS DGEMM (fp64 tensor cores, DMMA) at each size;
//   cublas_pedantic - cublasGemmEx with CUBLAS_COMPUTE_64F_PEDANTIC, to see whether NVIDIA's
//                 library has a CUDA-core DGEMM path and how fast it is;
//   variants    - the ladder's fp64 CUDA-core variants (default simt_tuned, warptile).
// and prints each GEMM as a share of the register-operand ceiling, of the inner loop and of DGEMM,
// and what the target asks for as shares of the same. Medians of --reps after --warmup, CUDA
// events.
//
// usage: fp64_peak [--sizes=4096,8192] [--variants=simt_tuned,warptile] [--warmup=3] [--reps=15]
//                  [--md=FILE]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_device.h"
#include "bench/fp64_ceilings.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"

namespace matserve::bench {
namespace {

struct Options {
  std::vector<std::int64_t> sizes = {4096, 8192};
  std::vector<std::string> variants = {"simt_tuned", "warptile"};
  int warmup = 3;
  int reps = 15;
  std::string md;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string name, value;
    if (!key_value(argv[i], &name, &value)) {
      std::fprintf(stderr, "fp64_peak: expected --key=value, got '%s'\n", argv[i]);
      return false;
    }
    if (name == "sizes") {
      o->sizes.clear();
      for (const auto& s : split_list(value)) o->sizes.push_back(std::stoll(s));
    } else if (name == "variants") {
      o->variants = split_list(value);
    } else if (name == "warmup") {
      o->warmup = std::stoi(value);
    } else if (name == "reps") {
      o->reps = std::max(1, std::stoi(value));
    } else if (name == "md") {
      o->md = value;
    } else {
      std::fprintf(stderr, "fp64_peak: unknown option %s\n", argv[i]);
      return false;
    }
  }
  return true;
}

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

struct Row {
  std::string what;
  std::int64_t n = 0;
  double tflops = 0;
};

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  if (kernels::cuda_device_count() == 0) {
    std::fprintf(stderr, "fp64_peak: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  int clock_khz = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0);
  // Hopper and Ampere data-centre parts: 64 fp64 lanes per SM, one FMA = 2 flops.
  const double datasheet_tflops = prop.multiProcessorCount * 64.0 * 2.0 * clock_khz * 1e3 / 1e12;
  auto resources = kernels::StreamResources::create();
  if (!resources.ok()) return 1;
  cudaStream_t stream = resources->stream();

  Fp64Ceilings ceil;
  if (!measure_fp64_ceilings(stream, o.warmup, o.reps, &ceil)) return 1;
  std::fprintf(stderr,
               "[fp64_peak] DFMA constant-bank operands %.2f, register operands %.2f, simt_tuned "
               "inner loop %.2f TFLOP/s (datasheet at %d MHz: %.2f)\n",
               ceil.constant_bank_tflops, ceil.registers_tflops, ceil.inner_loop_tflops,
               clock_khz / 1000, datasheet_tflops);

  std::vector<Row> rows;
  for (const std::int64_t n : o.sizes) {
    absl::StatusOr<SquareGemm> g =
        make_square_gemm(n, kernels::DType::kF64, kernels::Precision::kF64, stream);
    if (!g.ok()) return 1;
    const kernels::GemmProblem& p = g->problem;
    // cuBLAS with the pedantic fp64 compute type (row-major C = A B is column-major C^T = B^T A^T).
    {
      auto* handle = static_cast<cublasHandle_t>(resources->context().cublas);
      const double alpha = 1.0, beta = 0.0;
      const int ni = static_cast<int>(n);
      const double ms = event_time_ms(stream, o.warmup, o.reps, [&] {
        return cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &alpha, p.b, CUDA_R_64F,
                            ni, p.a, CUDA_R_64F, ni, &beta, p.c, CUDA_R_64F, ni,
                            CUBLAS_COMPUTE_64F_PEDANTIC,
                            CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS;
      });
      if (ms > 0) {
        rows.push_back({"cublas_pedantic", n, 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12});
        std::fprintf(stderr, "[fp64_peak] %lld^3 cublas_pedantic %.2f TFLOP/s\n",
                     static_cast<long long>(n), rows.back().tflops);
      }
    }
    std::vector<std::string> names = {"cublas"};
    names.insert(names.end(), o.variants.begin(), o.variants.end());
    for (const std::string& name : names) {
      const kernels::GemmVariant* v = kernels::find_gemm_variant(name);
      if (v == nullptr || !kernels::check_gemm_variant(*v, p).ok()) {
        std::fprintf(stderr, "[fp64_peak] %s cannot run fp64 %lld^3, skipped\n", name.c_str(),
                     static_cast<long long>(n));
        continue;
      }
      const double ms = event_time_ms(stream, o.warmup, o.reps,
                                      [&] { return v->launch(p, resources->context()).ok(); });
      if (ms <= 0) return 1;
      rows.push_back({name, n, 2.0 * double(n) * n * n / (ms * 1e-3) / 1e12});
      std::fprintf(stderr, "[fp64_peak] %lld^3 %-12s %.2f TFLOP/s\n", static_cast<long long>(n),
                   name.c_str(), rows.back().tflops);
    }
  }

  std::ostringstream md;
  auto pct = [](double part, double whole) {
    return whole > 0 ? fixed(100 * part / whole, 1) : "-";
  };
  md << "# fp64_peak: " << prop.name << "\n\nMedians of " << o.reps << " runs after " << o.warmup
     << ", CUDA events. Ceilings of the CUDA cores (no global memory work):\n\n"
     << "| ceiling | TFLOP/s | % of datasheet (" << clock_khz / 1000 << " MHz) |\n|---|---:|---:|\n"
     << "| DFMA, constant-bank operands | " << fixed(ceil.constant_bank_tflops, 2) << " | "
     << pct(ceil.constant_bank_tflops, datasheet_tflops) << " |\n"
     << "| DFMA, register operands (as in a GEMM) | " << fixed(ceil.registers_tflops, 2) << " | "
     << pct(ceil.registers_tflops, datasheet_tflops) << " |\n"
     << "| simt_tuned's inner loop alone (LDS.128 fragments, barrier per k-tile) | "
     << fixed(ceil.inner_loop_tflops, 2) << " | " << pct(ceil.inner_loop_tflops, datasheet_tflops)
     << " |\n\n"
     << "| n | kernel | TFLOP/s | % of register DFMA | % of inner loop | % of cuBLAS DGEMM "
        "|\n|---:|---|---:|---:|---:|---:|\n";
  double dgemm = 0;
  for (const Row& r : rows) {
    if (r.what == "cublas") dgemm = r.tflops;
    if (r.what == "cublas_pedantic") {
      md << "| " << r.n << " | cuBLAS, CUBLAS_COMPUTE_64F_PEDANTIC | " << fixed(r.tflops, 2)
         << " | " << pct(r.tflops, ceil.registers_tflops) << " | - | - |\n";
      continue;
    }
    md << "| " << r.n << " | " << (r.what == "cublas" ? "cuBLAS DGEMM (fp64 tensor cores)" : r.what)
       << " | " << fixed(r.tflops, 2) << " | " << pct(r.tflops, ceil.registers_tflops) << " | "
       << (r.what == "cublas" ? "-" : pct(r.tflops, ceil.inner_loop_tflops)) << " | "
       << pct(r.tflops, dgemm) << " |\n";
    if (r.what == "cublas") {
      md << "| " << r.n << " | *target: 50% of DGEMM* | " << fixed(dgemm / 2, 2) << " | "
         << pct(dgemm / 2, ceil.registers_tflops) << " | " << pct(dgemm / 2, ceil.inner_loop_tflops)
         << " | 50.0 |\n";
    }
  }
  emit_report(md.str(), o.md);
  return 0;
}

}  // namespace
}  // namespace matserve::bench

int main(int argc, char** argv) {
  return matserve::bench::run(argc, argv);
}
