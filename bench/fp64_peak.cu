// fp64_peak: how far the fp64 CUDA-core target of the kernel ladder (best fp64 CUDA-core variant
// >= 50% of cuBLAS DGEMM, issue 4) sits from what the CUDA cores can do at all. In one run it
// measures:
//   dfma peak   - a kernel of nothing but independent DFMAs in registers, at full occupancy: the
//                 fp64 rate of the CUDA cores at the clock the device holds under load (no loads,
//                 no shared memory, no barriers: no GEMM can beat it);
//   cublas      - cuBLAS DGEMM (fp64 tensor cores, DMMA) at each size;
//   cublas_pedantic - cublasGemmEx with CUBLAS_COMPUTE_64F_PEDANTIC, to see whether NVIDIA's
//                 library has a CUDA-core DGEMM path and how fast it is;
//   variants    - the ladder's fp64 CUDA-core variants (default simt_tuned, warptile).
// and prints each GEMM as a share of the DFMA peak and of DGEMM, and what the target asks for as
// a share of the DFMA peak. Medians of --reps after --warmup, CUDA events.
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
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"

namespace matserve::bench {
namespace {

constexpr int kChains = 8;          // independent accumulators per thread (hide DFMA latency)
constexpr int kInnerRepeats = 256;  // DFMAs per chain per outer iteration

// Each thread runs kChains independent chains a = a * x + y; x slightly below 1 keeps the values
// bounded. The sum is stored only when it equals a sentinel it never reaches, so the compiler
// keeps every DFMA but the kernel writes nothing.
__global__ void dfma_peak_kernel(int outer, double x, double y, double* sink) {
  double acc[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc[c] = threadIdx.x + c;
  for (int i = 0; i < outer; ++i) {
#pragma unroll
    for (int r = 0; r < kInnerRepeats; ++r) {
#pragma unroll
      for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], x, y);
    }
  }
  double sum = 0;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += acc[c];
  if (sum == -12345.678) *sink = sum;
}

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
  auto sink = kernels::allocate_device(sizeof(double));
  if (!resources.ok() || !sink.ok()) return 1;
  cudaStream_t stream = resources->stream();

  // DFMA peak: 8 blocks of 256 threads per SM (full occupancy at this kernel's register count).
  const int blocks = prop.multiProcessorCount * 8;
  const int threads = 256;
  const int outer = 64;
  const double peak_ms = event_time_ms(stream, o.warmup, o.reps, [&] {
    dfma_peak_kernel<<<blocks, threads, 0, stream>>>(outer, 0.999999, 1e-7,
                                                     static_cast<double*>(sink->data()));
    return cudaGetLastError() == cudaSuccess;
  });
  if (peak_ms <= 0) return 1;
  const double peak_flops = 2.0 * kChains * kInnerRepeats * outer * double(blocks) * threads;
  const double peak_tflops = peak_flops / (peak_ms * 1e-3) / 1e12;
  std::fprintf(stderr, "[fp64_peak] dfma peak %.2f TFLOP/s (datasheet at %d MHz: %.2f)\n",
               peak_tflops, clock_khz / 1000, datasheet_tflops);

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
  md << "# fp64_peak: " << prop.name << "\n\nDFMA peak (registers only, full occupancy): **"
     << fixed(peak_tflops, 2) << " TFLOP/s** (datasheet rate at the " << clock_khz / 1000
     << " MHz boost clock: " << fixed(datasheet_tflops, 2) << "). Medians of " << o.reps
     << " runs after " << o.warmup << ", CUDA events.\n\n"
     << "| n | kernel | TFLOP/s | % of DFMA peak | % of cuBLAS DGEMM "
        "|\n|---:|---|---:|---:|---:|\n";
  double dgemm = 0;
  for (const Row& r : rows) {
    if (r.what == "cublas") dgemm = r.tflops;
    if (r.what == "cublas_pedantic") {
      md << "| " << r.n << " | cuBLAS, CUBLAS_COMPUTE_64F_PEDANTIC | " << fixed(r.tflops, 2)
         << " | " << fixed(100 * r.tflops / peak_tflops, 1) << " | - |\n";
      continue;
    }
    md << "| " << r.n << " | " << (r.what == "cublas" ? "cuBLAS DGEMM (fp64 tensor cores)" : r.what)
       << " | " << fixed(r.tflops, 2) << " | " << fixed(100 * r.tflops / peak_tflops, 1) << " | "
       << (dgemm > 0 ? fixed(100 * r.tflops / dgemm, 1) : "-") << " |\n";
    if (r.what == "cublas") {
      md << "| " << r.n << " | *target: 50% of DGEMM* | " << fixed(dgemm / 2, 2) << " | "
         << fixed(100 * dgemm / 2 / peak_tflops, 1) << " | 50.0 |\n";
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
