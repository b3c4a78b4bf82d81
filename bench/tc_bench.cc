// Tensor-core GEMM benchmark: every selected registry variant against cuBLAS in the same precision
// and run, on square and rectangular shapes. Median of CUDA-event timings after warm-up; each
// variant's output is compared with cuBLAS's (relative L2) so that a fast wrong kernel shows.
// fp8: e4m3 data as given (--trans=NT is the layout the fp8 kernels read in place); fp8q: bf16
// data quantized inside the variant (amax scales), so its time includes quantization. fp8 rows
// are measured against cuBLASLt's fp8 (cublaslt_fp8, promoted accumulation) in the same run.
// usage: tc_bench [--variants=a,b] [--precisions=bf16,fp16,tf32,fp8,fp8q] [--sizes=1024,2048]
//                 [--rect] [--trans=NN,NT] [--json=FILE]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "kernels/cpu/element.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"

namespace mk = matserve::kernels;

namespace {

struct Shape {
  std::int64_t m, n, k;
  std::string family;
};

bool parse_precision(const std::string& s, mk::Precision* p) {
  if (s == "fp8" || s == "fp8q") {
    *p = mk::Precision::kF8;
    return true;
  }
  for (mk::Precision q : {mk::Precision::kF32, mk::Precision::kTF32, mk::Precision::kF16,
                          mk::Precision::kBF16, mk::Precision::kF64}) {
    if (mk::precision_name(q) == s) {
      *p = q;
      return true;
    }
  }
  return false;
}

mk::DType data_type(mk::Precision p) {
  if (p == mk::Precision::kF16) return mk::DType::kF16;
  if (p == mk::Precision::kBF16) return mk::DType::kBF16;
  if (p == mk::Precision::kF64) return mk::DType::kF64;
  return mk::DType::kF32;
}

// Random values in (-0.5, 0.5) generated in fp32 on the host, converted on the device.
bool fill_random(void* dst, mk::DType t, std::int64_t count, std::uint64_t seed,
                 cudaStream_t stream) {
  std::vector<float> host(static_cast<std::size_t>(count));
  std::uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : host) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
    if (v == 0.0f) v = 0.25f;
  }
  auto tmp = mk::allocate_device(host.size() * 4);
  if (!tmp.ok()) return false;
  if (cudaMemcpy(tmp->data(), host.data(), host.size() * 4, cudaMemcpyHostToDevice) !=
      cudaSuccess) {
    return false;
  }
  if (mk::launch_convert(tmp->data(), mk::DType::kF32, dst, t, count, stream) != cudaSuccess) {
    return false;
  }
  return cudaStreamSynchronize(stream) == cudaSuccess;
}

std::vector<double> download(const void* d, mk::DType t, std::int64_t count) {
  std::vector<std::byte> raw(static_cast<std::size_t>(count) * mk::dtype_size(t));
  cudaMemcpy(raw.data(), d, raw.size(), cudaMemcpyDeviceToHost);
  std::vector<double> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) out[i] = mk::load_element(raw.data(), t, i);
  return out;
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> variants = {
      "wmma",     "mma_sync",          "wgmma",     "wgmma_tma_store",
      "cublaslt", "cublaslt_fp8_fast", "wgmma_fp8", "wgmma_fp8_fast"};
  std::vector<std::string> precisions = {"bf16", "fp16"};
  std::vector<std::string> trans = {"NN"};
  std::vector<std::int64_t> sizes = {1024, 2048, 4096, 8192};
  bool rect = false;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* key) -> const char* {
      const std::size_t n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? a.c_str() + n : nullptr;
    };
    if (const char* v = val("--variants="))
      variants = matserve::bench::split_list(v);
    else if (const char* v = val("--precisions="))
      precisions = matserve::bench::split_list(v);
    else if (const char* v = val("--trans="))
      trans = matserve::bench::split_list(v);
    else if (const char* v = val("--json="))
      json_path = v;
    else if (const char* v = val("--sizes=")) {
      sizes.clear();
      for (const auto& s : matserve::bench::split_list(v)) sizes.push_back(std::stoll(s));
    } else if (a == "--rect") {
      rect = true;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (mk::cuda_device_count() == 0) {
    std::fprintf(stderr, "tc_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::vector<Shape> shapes;
  for (auto s : sizes) shapes.push_back({s, s, s, "square"});
  if (rect) {
    shapes.push_back({16384, 1024, 4096, "tall"});
    shapes.push_back({1024, 16384, 4096, "wide"});
    shapes.push_back({8192, 8192, 1024, "short-k"});
    shapes.push_back({1024, 1024, 16384, "deep-k"});
  }
  auto res = mk::StreamResources::create();
  if (!res.ok()) {
    std::fprintf(stderr, "tc_bench: %s\n", res.status().ToString().c_str());
    return 1;
  }
  const cudaStream_t stream = res->stream();
  const mk::ExecContext ctx = res->context();
  const mk::GemmVariant* cublas = mk::find_gemm_variant("cublas");
  const mk::GemmVariant* cublaslt_fp8 = mk::find_gemm_variant("cublaslt_fp8");
  mk::Event e0 = *mk::create_event(), e1 = *mk::create_event();
  std::ofstream json;
  if (!json_path.empty()) json.open(json_path);
  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  std::printf("%-6s %-4s %-8s %-20s %-10s %10s %9s %8s %10s\n", "prec", "op", "family", "shape",
              "variant", "median_ms", "TFLOP/s", "vs_ref", "relL2_vs_ref");
  std::printf("(ref: cuBLAS in the same precision; cublaslt_fp8 for fp8 rows)\n");
  int failures = 0;
  for (const auto& pname : precisions) {
    mk::Precision prec;
    if (!parse_precision(pname, &prec)) {
      std::fprintf(stderr, "unknown precision %s\n", pname.c_str());
      return 2;
    }
    const bool fp8 = prec == mk::Precision::kF8;
    const mk::DType in =
        fp8 ? (pname == "fp8" ? mk::DType::kF8E4M3 : mk::DType::kBF16) : data_type(prec);
    const mk::DType out = fp8 ? mk::DType::kBF16 : in;  // 16-bit and fp8 write bf16/16-bit
    for (const Shape& s : shapes) {
      auto da = mk::allocate_device(s.m * s.k * mk::dtype_size(in));
      auto db = mk::allocate_device(s.k * s.n * mk::dtype_size(in));
      auto dc = mk::allocate_device(s.m * s.n * mk::dtype_size(out));
      auto dref = mk::allocate_device(s.m * s.n * mk::dtype_size(out));
      if (!da.ok() || !db.ok() || !dc.ok() || !dref.ok()) {
        std::fprintf(stderr, "allocation failed for %lldx%lldx%lld\n", (long long)s.m,
                     (long long)s.n, (long long)s.k);
        continue;
      }
      fill_random(da->data(), in, s.m * s.k, 1, stream);
      fill_random(db->data(), in, s.k * s.n, 2, stream);
      for (const auto& t : trans) {
        mk::GemmProblem p;
        p.m = s.m;
        p.n = s.n;
        p.k = s.k;
        p.a_trans = t.size() > 0 && t[0] == 'T';
        p.b_trans = t.size() > 1 && t[1] == 'T';
        p.lda = p.a_trans ? s.m : s.k;
        p.ldb = p.b_trans ? s.k : s.n;
        p.ldc = s.n;
        p.a = da->data();
        p.b = db->data();
        p.in_type = in;
        p.out_type = out;
        p.precision = prec;
        p.alpha = 1.0;
        p.beta = 0.0;
        const double flops = 2.0 * s.m * s.n * s.k;
        // Returns the median time in ms, or a negative number when the variant refused.
        auto time_variant = [&](const mk::GemmVariant& v, void* c) -> double {
          mk::GemmProblem q = p;
          q.c = c;
          if (!mk::check_gemm_variant(v, q).ok()) return -1.0;
          for (int w = 0; w < 3; ++w) {
            if (!v.launch(q, ctx).ok()) return -2.0;
          }
          if (cudaStreamSynchronize(stream) != cudaSuccess) return -3.0;
          cudaEventRecord(e0.get(), stream);
          if (!v.launch(q, ctx).ok()) return -2.0;
          cudaEventRecord(e1.get(), stream);
          cudaEventSynchronize(e1.get());
          float first = 0;
          cudaEventElapsedTime(&first, e0.get(), e1.get());
          const int iters = std::clamp(static_cast<int>(300.0 / std::max(first, 0.001f)), 10, 200);
          std::vector<float> times;
          for (int i = 0; i < iters; ++i) {
            cudaEventRecord(e0.get(), stream);
            if (!v.launch(q, ctx).ok()) return -2.0;
            cudaEventRecord(e1.get(), stream);
            cudaEventSynchronize(e1.get());
            float ms = 0;
            cudaEventElapsedTime(&ms, e0.get(), e1.get());
            times.push_back(ms);
          }
          if (cudaGetLastError() != cudaSuccess) return -3.0;
          std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
          return times[times.size() / 2];
        };
        // cuBLAS has no fp8 path: fp8 rows are measured against cuBLASLt's fp8.
        const mk::GemmVariant& ref_variant = fp8 ? *cublaslt_fp8 : *cublas;
        const double ref_ms = time_variant(ref_variant, dref->data());
        const std::vector<double> ref = download(dref->data(), out, s.m * s.n);
        char shape_name[64];
        std::snprintf(shape_name, sizeof shape_name, "%lldx%lldx%lld", (long long)s.m,
                      (long long)s.n, (long long)s.k);
        auto report = [&](const std::string& name, double ms, double err) {
          const double tflops = ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
          const double ratio = ms > 0 && ref_ms > 0 ? ref_ms / ms : 0.0;
          std::printf("%-6s %-4s %-8s %-20s %-10s %10.4f %9.1f %8.3f %10.2e\n", pname.c_str(),
                      t.c_str(), s.family.c_str(), shape_name, name.c_str(), ms, tflops, ratio,
                      err);
          std::fflush(stdout);
          if (json.is_open()) {
            json << "{\"precision\":\"" << pname << "\",\"trans\":\"" << t << "\",\"family\":\""
                 << s.family << "\",\"m\":" << s.m << ",\"n\":" << s.n << ",\"k\":" << s.k
                 << ",\"variant\":\"" << name << "\",\"median_ms\":" << ms
                 << ",\"tflops\":" << tflops << ",\"ratio_vs_cublas\":" << ratio
                 << ",\"rel_l2_vs_cublas\":" << err << ",\"device\":\"" << prop.name << "\"}\n";
          }
        };
        report(std::string(ref_variant.name), ref_ms, 0.0);
        for (const auto& vn : variants) {
          const mk::GemmVariant* v = mk::find_gemm_variant(vn);
          if (v == nullptr || !v->supports(prec) || v == &ref_variant) continue;
          cudaMemset(dc->data(), 0xff, s.m * s.n * mk::dtype_size(out));
          const double ms = time_variant(*v, dc->data());
          if (ms < 0) {
            std::printf("%-6s %-4s %-8s %-20s %-10s %s\n", pname.c_str(), t.c_str(),
                        s.family.c_str(), shape_name, vn.c_str(),
                        ms == -1.0 ? "refused (constraint)" : "FAILED");
            if (ms != -1.0) ++failures;
            continue;
          }
          const std::vector<double> got = download(dc->data(), out, s.m * s.n);
          const double err = rel_l2(got, ref);
          if (!(err < 2e-2)) ++failures;
          report(vn, ms, err);
        }
      }
    }
  }
  std::printf("tc_bench: %s\n", failures == 0 ? "all outputs agree with cuBLAS" : "FAILURES");
  return failures == 0 ? 0 : 1;
}
