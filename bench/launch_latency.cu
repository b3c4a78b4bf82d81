// launch_latency: what one small GEMM costs a caller that waits for it, per variant. For each
// shape and variant it measures, the way the server's CUDA backend runs a request (its own stream
// and cuBLAS handle from a pool of slots, events around the launch, then a wait):
//   host  - the wall time of the variant's launch() call (cuBLAS's host-side work included);
//   sync  - launch + event record + cudaEventSynchronize, the latency a request sees;
//   gpu   - the event interval around the launch (what the server reports as kernel time).
// An empty kernel launched and waited for gives the floor. Calls rotate over --threads threads
// (the server's handlers run on gRPC's thread pool) and --slots stream slots. Medians of --reps
// calls after --warmup. This is what `auto` should weigh for small problems, where the host-side
// work of a library call can exceed the kernel.
//
// usage: launch_latency [--sizes=64,128,256,512,1024] [--precisions=fp32,fp64]
//                       [--variants=cublas,simt_tuned,...] [--slots=8] [--threads=1]
//                       [--warmup=50] [--reps=500] [--md=FILE]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_device.h"
#include "kernels/autotune.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry.h"

namespace matserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

__global__ void empty_kernel() {}

struct Options {
  std::vector<std::int64_t> sizes = {64, 128, 256, 512, 1024};
  std::vector<std::string> precisions = {"fp32", "fp64"};
  std::vector<std::string> variants = {"cublas",         "cublas_sgemm_default", "simt_tuned",
                                       "simt_pipelined", "vectorized_2d",        "warptile"};
  int slots = 8;
  int threads = 1;
  int warmup = 50;
  int reps = 500;
  std::string md;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string name, value;
    if (!key_value(a, &name, &value)) {
      std::fprintf(stderr, "launch_latency: expected --key=value, got '%s'\n", a.c_str());
      return false;
    }
    if (name == "sizes") {
      o->sizes.clear();
      for (const auto& s : split_list(value)) o->sizes.push_back(std::stoll(s));
    } else if (name == "precisions") {
      o->precisions = split_list(value);
    } else if (name == "variants") {
      o->variants = split_list(value);
    } else if (name == "slots") {
      o->slots = std::max(1, std::stoi(value));
    } else if (name == "threads") {
      o->threads = std::max(1, std::stoi(value));
    } else if (name == "warmup") {
      o->warmup = std::stoi(value);
    } else if (name == "reps") {
      o->reps = std::max(1, std::stoi(value));
    } else if (name == "md") {
      o->md = value;
    } else {
      std::fprintf(stderr, "launch_latency: unknown option %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

// One stream slot, as the server's pool holds them.
struct Slot {
  kernels::StreamResources resources;
  kernels::Event before, after;
};

struct Sample {
  std::vector<double> host_us, sync_us, gpu_us;
};

// Runs `call` (given the slot) warmup + reps times, call i on thread i % threads and slot
// i % slots, one call at a time (a closed loop with concurrency 1, like one client).
Sample measure(std::vector<Slot>& slots, int threads, int warmup, int reps,
               const std::function<bool(Slot&)>& call) {
  Sample out;
  std::mutex mu;
  std::condition_variable turn_changed;
  int turn = 0;
  bool failed = false;
  const int total = warmup + reps;
  auto worker = [&](int me) {
    for (;;) {
      int i = 0;
      {
        std::unique_lock lock(mu);
        turn_changed.wait(lock, [&] { return turn >= total || failed || turn % threads == me; });
        if (turn >= total || failed) return;
        i = turn;
      }
      Slot& s = slots[static_cast<std::size_t>(i) % slots.size()];
      cudaStream_t stream = s.resources.stream();
      const auto t0 = Clock::now();
      cudaEventRecord(s.before.get(), stream);
      const auto t1 = Clock::now();
      const bool ok = call(s);
      const auto t2 = Clock::now();
      cudaEventRecord(s.after.get(), stream);
      const bool synced = cudaEventSynchronize(s.after.get()) == cudaSuccess;
      const auto t3 = Clock::now();
      float ms = 0;
      cudaEventElapsedTime(&ms, s.before.get(), s.after.get());
      std::lock_guard lock(mu);
      if (!ok || !synced) failed = true;
      if (i >= warmup) {
        out.host_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
        out.sync_us.push_back(std::chrono::duration<double, std::micro>(t3 - t0).count());
        out.gpu_us.push_back(1e3 * ms);
      }
      ++turn;
      turn_changed.notify_all();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker, t);
  for (auto& t : pool) t.join();
  if (failed) return Sample{};
  return out;
}

struct Row {
  std::string precision, variant;
  std::int64_t size = 0;
  double host = 0, sync = 0, gpu = 0;
  std::string note;
};

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  if (kernels::cuda_device_count() == 0) {
    std::fprintf(stderr, "launch_latency: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::vector<Slot> slots;
  for (int i = 0; i < o.slots; ++i) {
    auto r = kernels::StreamResources::create();
    auto e0 = kernels::create_event();
    auto e1 = kernels::create_event();
    if (!r.ok() || !e0.ok() || !e1.ok()) {
      std::fprintf(stderr, "launch_latency: could not create stream slot %d\n", i);
      return 1;
    }
    slots.push_back({*std::move(r), *std::move(e0), *std::move(e1)});
  }
  std::vector<Row> rows;
  {
    const Sample s = measure(slots, o.threads, o.warmup, o.reps, [](Slot& slot) {
      empty_kernel<<<1, 32, 0, slot.resources.stream()>>>();
      return cudaGetLastError() == cudaSuccess;
    });
    rows.push_back({"-", "empty kernel", 0, median(s.host_us), median(s.sync_us), median(s.gpu_us),
                    "the launch floor"});
    std::fprintf(stderr, "[launch_latency] empty kernel: host %.1f sync %.1f gpu %.1f us\n",
                 rows.back().host, rows.back().sync, rows.back().gpu);
  }
  for (const std::string& prec_name : o.precisions) {
    const auto prec = kernels::parse_precision_name(prec_name);
    if (!prec.ok() || (*prec != kernels::Precision::kF32 && *prec != kernels::Precision::kF64)) {
      std::fprintf(stderr, "launch_latency: %s: only fp32 and fp64\n", prec_name.c_str());
      continue;
    }
    const kernels::DType dt =
        *prec == kernels::Precision::kF64 ? kernels::DType::kF64 : kernels::DType::kF32;
    for (const std::int64_t n : o.sizes) {
      absl::StatusOr<SquareGemm> g = make_square_gemm(n, dt, *prec, slots[0].resources.stream());
      if (!g.ok()) return 1;
      cudaDeviceSynchronize();
      const kernels::GemmProblem& p = g->problem;
      for (const std::string& name : o.variants) {
        Row row{prec_name, name, n};
        std::function<bool(Slot&)> call;
        if (name == "cublas_sgemm_default") {
          // The plain library call a user would write: cublasSgemm / cublasDgemm (default math,
          // no tensor cores for fp32 without TF32 opt-in), not the pedantic compute type.
          row.note = "cublasSgemm/Dgemm, default math mode";
          call = [&p, dt](Slot& slot) {
            auto h = static_cast<cublasHandle_t>(slot.resources.context().cublas);
            const int ni = static_cast<int>(p.n);
            if (dt == kernels::DType::kF64) {
              const double one = 1, zero = 0;
              return cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one,
                                 static_cast<const double*>(p.b), ni,
                                 static_cast<const double*>(p.a), ni, &zero,
                                 static_cast<double*>(p.c), ni) == CUBLAS_STATUS_SUCCESS;
            }
            const float one = 1, zero = 0;
            return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one,
                               static_cast<const float*>(p.b), ni, static_cast<const float*>(p.a),
                               ni, &zero, static_cast<float*>(p.c), ni) == CUBLAS_STATUS_SUCCESS;
          };
        } else {
          const kernels::GemmVariant* v = kernels::find_gemm_variant(name);
          if (v == nullptr || v->backend != kernels::Backend::kCuda ||
              !kernels::check_gemm_variant(*v, p).ok()) {
            continue;
          }
          call = [&p, v](Slot& slot) { return v->launch(p, slot.resources.context()).ok(); };
        }
        const Sample s = measure(slots, o.threads, o.warmup, o.reps, call);
        if (s.sync_us.empty()) {
          row.note = "failed";
        } else {
          row.host = median(s.host_us);
          row.sync = median(s.sync_us);
          row.gpu = median(s.gpu_us);
        }
        std::fprintf(stderr,
                     "[launch_latency] %s %lld^3 %-22s host %7.1f sync %7.1f gpu %7.1f us\n",
                     prec_name.c_str(), static_cast<long long>(n), name.c_str(), row.host, row.sync,
                     row.gpu);
        rows.push_back(row);
      }
    }
  }
  std::ostringstream md;
  md << "# launch_latency: " << prop.name << "\n\nslots " << o.slots << ", threads " << o.threads
     << ", medians of " << o.reps << " calls after " << o.warmup
     << " (us). host = the launch call; sync = launch + wait, what a request sees; gpu = event "
        "interval around the launch.\n\n| precision | size | variant | host us | sync us | gpu us "
        "| note |\n|---|---:|---|---:|---:|---:|---|\n";
  for (const Row& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %lld | %s | %.1f | %.1f | %.1f | %s |\n",
                  r.precision.c_str(), static_cast<long long>(r.size), r.variant.c_str(), r.host,
                  r.sync, r.gpu, r.note.c_str());
    md << line;
  }
  emit_report(md.str(), o.md);
  return 0;
}

}  // namespace
}  // namespace matserve::bench

int main(int argc, char** argv) {
  return matserve::bench::run(argc, argv);
}
