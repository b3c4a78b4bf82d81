// gemm_bench: times every CUDA GEMM variant in the registry (or those named) for each precision
// over square sizes and the rectangular families, with cuBLAS measured in the same run as the
// yardstick; checks each result against cuBLAS's; writes JSON, a Markdown table and the autotune
// table; then re-times the autotune choice ("auto") per shape. Progress goes to stderr.
//
// usage: gemm_bench [--variants=a,b] [--precisions=fp32,fp64] [--sizes=512,1024]
//                   [--families=wide,tall,random,thin] [--shapes=MxNxK,...] [--trans=NN]
//                   [--warmup=2] [--reps=10] [--max-seconds-per-case=0.5]
//                   [--skip-above-seconds=2] [--json=F] [--md=F] [--autotune-out=F]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_device.h"
#include "bench/gemm_report.h"
#include "bench/gemm_shapes.h"
#include "kernels/autotune.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"

namespace matserve::bench {
namespace {

using kernels::GemmProblem;
using kernels::GemmVariant;

struct Options {
  std::vector<std::string> variants;  // empty: every CUDA variant
  std::vector<std::string> precisions = {"fp32", "fp64"};
  std::vector<std::int64_t> sizes = {512, 1024, 2048, 4096, 8192};
  std::vector<std::string> families = {"wide", "tall", "random", "thin"};
  std::vector<GemmShape> shapes;
  std::string trans = "NN";
  int warmup = 2;
  int reps = 10;
  double max_seconds = 0.5;
  double skip_above = 2.0;
  std::string json, md, autotune_out;
};

bool parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string key, val;
    if (!key_value(arg, &key, &val)) {
      std::fprintf(stderr, "gemm_bench: expected --key=value, got '%s'\n", arg.c_str());
      return false;
    }
    if (key == "variants") {
      o->variants = split_list(val);
    } else if (key == "precisions") {
      o->precisions = split_list(val);
    } else if (key == "sizes") {
      o->sizes.clear();
      for (const auto& s : split_list(val)) o->sizes.push_back(std::stoll(s));
    } else if (key == "families") {
      o->families = split_list(val);
    } else if (key == "shapes") {
      for (const auto& s : split_list(val)) {
        GemmShape g;
        if (!parse_shape(s, &g)) {
          std::fprintf(stderr, "gemm_bench: bad shape '%s' (want MxNxK)\n", s.c_str());
          return false;
        }
        o->shapes.push_back(g);
      }
    } else if (key == "trans" && val.size() == 2) {
      o->trans = val;
    } else if (key == "warmup") {
      o->warmup = std::stoi(val);
    } else if (key == "reps") {
      o->reps = std::max(1, std::stoi(val));
    } else if (key == "max-seconds-per-case") {
      o->max_seconds = std::stod(val);
    } else if (key == "skip-above-seconds") {
      o->skip_above = std::stod(val);
    } else if (key == "json") {
      o->json = val;
    } else if (key == "md") {
      o->md = val;
    } else if (key == "autotune-out") {
      o->autotune_out = val;
    } else {
      std::fprintf(stderr, "gemm_bench: unknown option '%s'\n", arg.c_str());
      return false;
    }
  }
  return true;
}

struct Timing {
  std::string status = "ok";
  double median_ms = 0, min_ms = 0;
  int reps = 0;
};

// Warm-up, one run to size the repetition count, then `reps` runs each between two events.
Timing time_variant(const GemmVariant& v, const GemmProblem& p, const kernels::ExecContext& ctx,
                    cudaStream_t stream, const Options& o) {
  Timing t;
  auto launch_ok = [&]() -> bool {
    absl::Status s = v.launch(p, ctx);
    if (!s.ok()) {
      t.status = "error: " + std::string(s.message());
      return false;
    }
    return true;
  };
  for (int i = 0; i < o.warmup; ++i) {
    if (!launch_ok()) return t;
  }
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    t.status = std::string("error: ") + cudaGetErrorString(e);
    return t;
  }
  auto start = kernels::create_event();
  auto stop = kernels::create_event();
  if (!start.ok() || !stop.ok()) {
    t.status = "error: cudaEventCreate";
    return t;
  }
  auto one = [&]() -> double {
    cudaEventRecord(start->get(), stream);
    if (!launch_ok()) return -1.0;
    cudaEventRecord(stop->get(), stream);
    if (cudaEventSynchronize(stop->get()) != cudaSuccess) return -1.0;
    float ms = 0;
    cudaEventElapsedTime(&ms, start->get(), stop->get());
    return ms;
  };
  const double first = one();
  if (first < 0) {
    if (t.status == "ok") t.status = "error: timing failed";
    return t;
  }
  const int reps =
      std::clamp(static_cast<int>(o.max_seconds * 1e3 / std::max(first, 1e-3)), 3, o.reps);
  std::vector<double> ms = {first};
  for (int i = 1; i < reps; ++i) {
    const double x = one();
    if (x < 0) {
      if (t.status == "ok") t.status = "error: timing failed";
      return t;
    }
    ms.push_back(x);
  }
  std::sort(ms.begin(), ms.end());
  t.reps = static_cast<int>(ms.size());
  t.median_ms =
      ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  t.min_ms = ms.front();
  return t;
}

double copy_bandwidth_gbps(cudaStream_t stream) {
  const std::size_t bytes = std::size_t{1} << 30;
  auto a = kernels::allocate_device(bytes);
  auto b = kernels::allocate_device(bytes);
  if (!a.ok() || !b.ok()) return 0.0;
  cudaMemsetAsync(a->data(), 1, bytes, stream);
  const double ms = event_time_ms(stream, 1, 7, [&] {
    return cudaMemcpyAsync(b->data(), a->data(), bytes, cudaMemcpyDeviceToDevice, stream) ==
           cudaSuccess;
  });
  return ms > 0 ? 2.0 * bytes / (ms * 1e-3) / 1e9 : 0.0;
}

std::string today() {
  std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return buf;
}

bool write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  std::ofstream out(path);
  out << text;
  return static_cast<bool>(out);
}

int run(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, &o)) return 2;
  if (kernels::cuda_device_count() == 0) {
    std::fprintf(stderr, "gemm_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  auto res = kernels::StreamResources::create();
  if (!res.ok()) {
    std::fprintf(stderr, "gemm_bench: %s\n", std::string(res.status().message()).c_str());
    return 1;
  }
  const kernels::ExecContext ctx = res->context();
  cudaStream_t stream = res->stream();

  GemmBenchRun run;
  run.device = prop.name;
  run.date = today();
  for (int i = 0; i < argc; ++i) run.command += (i ? " " : "") + std::string(argv[i]);
  run.trans = o.trans;
  run.copy_gbps = copy_bandwidth_gbps(stream);
  std::fprintf(stderr, "[gemm_bench] %s, copy %.0f GB/s\n", run.device.c_str(), run.copy_gbps);

  std::vector<GemmShape> shapes = square_shapes(o.sizes);
  for (const auto& f : o.families) {
    for (const auto& s : family_shapes(f)) shapes.push_back(s);
  }
  for (const auto& s : o.shapes) shapes.push_back(s);

  // cuBLAS first (the yardstick), then the rest in registry order.
  std::vector<const GemmVariant*> variants;
  if (const GemmVariant* c = kernels::find_gemm_variant("cublas")) variants.push_back(c);
  for (const GemmVariant& v : kernels::gemm_variants()) {
    if (v.backend != kernels::Backend::kCuda || v.name == "cublas") continue;
    if (!o.variants.empty() &&
        std::find(o.variants.begin(), o.variants.end(), std::string(v.name)) == o.variants.end()) {
      continue;
    }
    variants.push_back(&v);
  }

  for (const std::string& prec_name : o.precisions) {
    auto prec = kernels::parse_precision_name(prec_name);
    if (!prec.ok() || (*prec != kernels::Precision::kF32 && *prec != kernels::Precision::kF64)) {
      std::fprintf(stderr, "gemm_bench: precision %s: only fp32 and fp64 data are generated here\n",
                   prec_name.c_str());
      continue;
    }
    const kernels::DType dt =
        *prec == kernels::Precision::kF64 ? kernels::DType::kF64 : kernels::DType::kF32;
    const std::size_t es = kernels::dtype_size(dt);
    std::map<std::string, double> last_gflops;  // for skipping predicted-slow cases
    const std::size_t first_result = run.results.size();
    std::map<std::string, double> cublas_ms;  // per shape label
    for (const GemmShape& s : shapes) {
      auto a = kernels::allocate_device(s.m * s.k * es);
      auto b = kernels::allocate_device(s.k * s.n * es);
      auto c = kernels::allocate_device(s.m * s.n * es);
      auto ref = kernels::allocate_device(s.m * s.n * es);
      if (!a.ok() || !b.ok() || !c.ok() || !ref.ok()) {
        std::fprintf(stderr, "gemm_bench: out of device memory at %s\n", s.label().c_str());
        continue;
      }
      fill_random(a->data(), dt, s.m * s.k, 11, stream);
      fill_random(b->data(), dt, s.k * s.n, 12, stream);
      GemmProblem p;
      p.m = s.m;
      p.n = s.n;
      p.k = s.k;
      p.a_trans = o.trans[0] == 'T';
      p.b_trans = o.trans[1] == 'T';
      p.a = a->data();
      p.lda = p.a_trans ? s.m : s.k;
      p.b = b->data();
      p.ldb = p.b_trans ? s.k : s.n;
      p.c = c->data();
      p.ldc = s.n;
      p.in_type = dt;
      p.out_type = dt;
      p.precision = *prec;
      p.alpha = 1.0;
      p.beta = 0.0;
      const double flops = kernels::gemm_flops(p);
      bool have_ref = false;
      for (const GemmVariant* v : variants) {
        if (!v->supports(*prec)) continue;
        GemmResult r;
        r.precision = prec_name;
        r.shape = s;
        r.variant = std::string(v->name);
        const std::string name(v->name);
        if (absl::Status st = kernels::check_gemm_variant(*v, p); !st.ok()) {
          r.status = "refused: " + std::string(st.message());
        } else if (last_gflops.count(name) && flops / (last_gflops[name] * 1e9) > o.skip_above) {
          char buf[96];
          std::snprintf(buf, sizeof(buf), "skipped: predicted %.1f s per run",
                        flops / (last_gflops[name] * 1e9));
          r.status = buf;
        } else {
          cudaMemsetAsync(c->data(), 0xff, s.m * s.n * es, stream);  // poison: NaN
          const Timing t = time_variant(*v, p, ctx, stream, o);
          r.status = t.status;
          r.median_ms = t.median_ms;
          r.min_ms = t.min_ms;
          r.reps = t.reps;
          if (t.status == "ok") {
            r.gflops = flops / (t.median_ms * 1e-3) / 1e9;
            last_gflops[name] = r.gflops;
            if (name == "cublas") {
              cudaMemcpyAsync(ref->data(), c->data(), s.m * s.n * es, cudaMemcpyDeviceToDevice,
                              stream);
              have_ref = true;
              cublas_ms[s.label()] = t.median_ms;
            }
            if (have_ref)
              r.rel_err_vs_cublas = rel_l2_diff(c->data(), ref->data(), dt, s.m * s.n, stream);
            if (cublas_ms.count(s.label())) r.ratio_to_cublas = cublas_ms[s.label()] / t.median_ms;
          }
        }
        std::fprintf(
            stderr, "[gemm_bench] %s %-16s %-28s %10.3f ms %9.1f GFLOP/s %5.1f%% err %.1e %s\n",
            prec_name.c_str(), s.label().c_str(), r.variant.c_str(), r.median_ms, r.gflops,
            100 * r.ratio_to_cublas, r.rel_err_vs_cublas, r.status == "ok" ? "" : r.status.c_str());
        run.results.push_back(r);
      }
      // Partial results survive a run cut short by a time limit.
      write_file(o.json, to_json(run));
      write_file(o.md, to_markdown(run));
      write_file(o.autotune_out, to_autotune(run, 1e-4, 1e-10).to_tsv());
    }
    // auto: the autotune table from this precision's measurements, its choice re-timed.
    GemmBenchRun part = run;
    part.results.assign(run.results.begin() + first_result, run.results.end());
    const kernels::AutotuneTable table = to_autotune(part, 1e-4, 1e-10);
    for (const GemmShape& s : shapes) {
      GemmProblem q;
      q.m = s.m;
      q.n = s.n;
      q.k = s.k;
      q.a_trans = o.trans[0] == 'T';
      q.b_trans = o.trans[1] == 'T';
      q.lda = q.a_trans ? s.m : s.k;
      q.ldb = q.b_trans ? s.k : s.n;
      q.ldc = s.n;
      q.in_type = q.out_type = dt;
      q.precision = *prec;
      const std::string chosen =
          table.choose(run.device, *prec, s.m, s.n, s.k, [&](std::string_view name) {
            const GemmVariant* v = kernels::find_gemm_variant(name);
            return v != nullptr && kernels::check_gemm_variant(*v, q).ok();
          });
      const GemmVariant* v = kernels::find_gemm_variant(chosen);
      auto a = kernels::allocate_device(s.m * s.k * es);
      auto b = kernels::allocate_device(s.k * s.n * es);
      auto c = kernels::allocate_device(s.m * s.n * es);
      if (v == nullptr || !a.ok() || !b.ok() || !c.ok()) continue;
      fill_random(a->data(), dt, s.m * s.k, 21, stream);
      fill_random(b->data(), dt, s.k * s.n, 22, stream);
      q.a = a->data();
      q.b = b->data();
      q.c = c->data();
      const Timing t = time_variant(*v, q, ctx, stream, o);
      GemmResult r;
      r.precision = prec_name;
      r.shape = s;
      r.variant = "auto";
      r.chosen = chosen;
      r.status = t.status;
      r.median_ms = t.median_ms;
      r.min_ms = t.min_ms;
      r.reps = t.reps;
      if (t.status == "ok") {
        r.gflops = kernels::gemm_flops(q) / (t.median_ms * 1e-3) / 1e9;
        if (cublas_ms.count(s.label())) r.ratio_to_cublas = cublas_ms[s.label()] / t.median_ms;
      }
      std::fprintf(stderr, "[gemm_bench] %s %-16s auto -> %-20s %10.3f ms %5.1f%% of cuBLAS\n",
                   prec_name.c_str(), s.label().c_str(), chosen.c_str(), r.median_ms,
                   100 * r.ratio_to_cublas);
      run.results.push_back(r);
    }
  }

  bool ok = write_file(o.json, to_json(run)) && write_file(o.md, to_markdown(run)) &&
            write_file(o.autotune_out, to_autotune(run, 1e-4, 1e-10).to_tsv());
  std::fputs(to_markdown(run).c_str(), stdout);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace matserve::bench

int main(int argc, char** argv) {
  return matserve::bench::run(argc, argv);
}
