// graph_timing: where the device time of one small, graph-replayed GEMM goes. The server replays
// each repeated call from a CUDA graph whose first and last nodes are external event records
// (its kernel_us); PyTorch's device time of the same cuBLAS call, measured with the stream held
// busy, is a few microseconds shorter on small shapes. This times the same call of the kernels
// library (the server's cuBLAS variant, handle and workspace from StreamResources) several ways:
//   direct        spin; event; launch; event                 (torch's method: device time only)
//   graph         spin; event; graph{gemm}; event
//   graph+events  spin; outer event; graph{event, gemm, event}; outer event  (inner and outer)
//   server        graph{event, gemm, event} on an idle GPU, inner events (what kernel_us holds)
//   server, empty the same graph around an empty kernel: the event nodes' own cost
//   server, idle N us   the server's graph after the host has waited N us (--idle-us), as a
//                 server between one client's calls; the GPU has nothing to do meanwhile
//   server, asleep N us the same with the host thread asleep for the wait (a handler's wake-up)
//   gated         the server's graph behind its LaunchGate (kernels/cuda/launch_gate.h), opened
//                 once the launch has returned (the server's --gate_launches)
//   8 threads     each call launched by the next of 8 host threads in turn, as a server's gRPC
//                 threads take one client's calls: the driver's state is cold in that core
//   cold          the launching thread first writes 64 MiB (the driver's state evicted)
//   stream wait   the graph behind a cuStreamWaitValue32 on a host word instead of the gate
//                 kernel (comparison only: it cannot time out, see StreamWaitGate)
// "spin" is a kernel that keeps the stream busy for --spin-us, so that every command behind it
// is queued on the device before it starts and no host launch time is inside an interval.
// Each row also gives the host's time in the launch call and its wall time to the synchronize.
//
//   copied in     the gated graph with its operands first copied in from pinned host memory
//                 (as the server's inline operands are)
// --batch-arrays=1 gives a batch as device pointer arrays (the server's resident matrices that
// are not evenly spaced, and kept results) instead of strides.
//
// usage: graph_timing [--sizes=256,1024] [--precisions=fp32,bf16] [--variant=cublas] [--batch=1]
//                     [--batch-arrays=0] [--spin-us=300] [--idle-us=50,200,1000] [--warmup=20]
//                     [--reps=200]
//                     [--md=FILE]
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_device.h"
#include "kernels/autotune.h"
#include "kernels/cuda/launch_gate.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/precision.h"
#include "kernels/registry.h"

namespace matserve::bench {
namespace {

__global__ void spin_kernel(unsigned long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

__global__ void empty_kernel() {}

struct Options {
  std::vector<std::int64_t> sizes = {256, 1024};
  std::vector<std::string> precisions = {"fp32", "bf16"};
  std::string variant = "cublas";
  std::int64_t batch = 1;     // products per call (a strided batch)
  bool batch_arrays = false;  // the batch given as device pointer arrays instead of strides
  double spin_us = 300;
  std::vector<double> idle_us = {50, 200, 1000};
  int warmup = 20;
  int reps = 200;
  std::string md;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string name, value;
    if (!key_value(argv[i], &name, &value)) {
      std::fprintf(stderr, "graph_timing: expected --key=value, got '%s'\n", argv[i]);
      return false;
    }
    if (name == "sizes") {
      o->sizes.clear();
      for (const auto& s : split_list(value)) o->sizes.push_back(std::stoll(s));
    } else if (name == "precisions") {
      o->precisions = split_list(value);
    } else if (name == "variant") {
      o->variant = value;
    } else if (name == "batch") {
      o->batch = std::stoll(value);
    } else if (name == "batch-arrays") {
      o->batch_arrays = value == "1" || value == "true";
    } else if (name == "spin-us") {
      o->spin_us = std::stod(value);
    } else if (name == "idle-us") {
      o->idle_us.clear();
      for (const auto& s : split_list(value)) o->idle_us.push_back(std::stod(s));
    } else if (name == "warmup") {
      o->warmup = std::stoi(value);
    } else if (name == "reps") {
      o->reps = std::stoi(value);
    } else if (name == "md") {
      o->md = value;
    } else {
      std::fprintf(stderr, "graph_timing: unknown option --%s\n", name.c_str());
      return false;
    }
  }
  return true;
}

// A graph captured from `enqueue` on `stream`, instantiated and uploaded.
struct CapturedGraph {
  cudaGraphExec_t exec = nullptr;
  ~CapturedGraph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
  }
};

bool capture(cudaStream_t stream, const std::function<bool()>& enqueue, CapturedGraph* out) {
  if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return false;
  const bool ok = enqueue();
  cudaGraph_t graph = nullptr;
  if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !ok) return false;
  const bool made = cudaGraphInstantiate(&out->exec, graph, 0) == cudaSuccess &&
                    cudaGraphUpload(out->exec, stream) == cudaSuccess;
  cudaGraphDestroy(graph);
  return made;
}

float elapsed_us(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? 1e3f * ms : -1.f;
}

struct Timer {
  kernels::Event outer0, outer1, inner0, inner1;
};

// The alternative to the gate kernel, for comparison only: a stream wait (cuStreamWaitValue32)
// on a mapped host word, released after the launch. It holds the stream's whole launch rather than
// the graph's later nodes, and cannot time out: a launch that must drain the device (a lazy
// kernel load) would deadlock behind it, which is why the server does not use it. Every graph
// timed behind it here has run before.
class StreamWaitGate {
 public:
  StreamWaitGate() {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    void* device = nullptr;
    absl::StatusOr<kernels::PinnedBuffer> word = kernels::allocate_pinned(sizeof(unsigned));
    if (!word.ok() ||
        cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess ||
        cudaHostGetDevicePointer(&device, word->data(), 0) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    wait_ = reinterpret_cast<decltype(wait_)>(fn);
    word_buffer_ = *std::move(word);
    word_ = static_cast<unsigned*>(word_buffer_.data());
    device_word_ = static_cast<unsigned*>(device);
    *word_ = 0;
  }
  StreamWaitGate(const StreamWaitGate&) = delete;
  StreamWaitGate& operator=(const StreamWaitGate&) = delete;
  bool ok() const { return wait_ != nullptr; }
  bool close(cudaStream_t stream) {
    ++ticket_;
    return wait_(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_word_),
                 ticket_, CU_STREAM_WAIT_VALUE_GEQ) == CUDA_SUCCESS;
  }
  void open() { __atomic_store_n(word_, ticket_, __ATOMIC_RELEASE); }

 private:
  CUresult (*wait_)(CUstream, CUdeviceptr, cuuint32_t, unsigned) = nullptr;
  kernels::PinnedBuffer word_buffer_;  // the host word (pinned, mapped)
  unsigned* word_ = nullptr;
  unsigned* device_word_ = nullptr;
  unsigned ticket_ = 0;
};

// Waits `us` microseconds on the host, spinning, or sleeping (the thread then wakes up as a
// server's handler does when a request arrives, its core possibly halted meanwhile).
void host_wait(double us, bool asleep) {
  const auto wait = std::chrono::duration<double, std::micro>(us);
  if (asleep) {
    std::this_thread::sleep_for(wait);
    return;
  }
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Median inner and outer intervals of `reps` runs of `run` after `warmup`; `busy` puts the spin
// kernel first; otherwise the host waits `idle_us` before each run, the GPU idle.
// `launch` is the host's time in `run` (the enqueue of the call's work).
struct Medians {
  double inner = -1, outer = -1, launch = -1, wall = -1;
};

// Runs each call on the next of `n` host threads in turn (as a gRPC server's pollers take one
// client's calls), the caller waiting for it: the CUDA driver's state is then cold in that
// thread's core.
class RotatingThreads {
 public:
  explicit RotatingThreads(int n) {
    for (int i = 0; i < n; ++i) workers_.emplace_back(std::make_unique<Worker>());
  }
  ~RotatingThreads() {
    for (auto& w : workers_) w->stop();
  }
  void run(const std::function<void()>& fn) { workers_[next_++ % workers_.size()]->run(fn); }

 private:
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    const std::function<void()>* job = nullptr;
    bool done = false, quit = false;
    std::thread thread{[this] { loop(); }};
    void loop() {
      std::unique_lock lock(mu);
      while (true) {
        cv.wait(lock, [this] { return job != nullptr || quit; });
        if (quit) return;
        (*job)();
        job = nullptr;
        done = true;
        cv.notify_all();
      }
    }
    void run(const std::function<void()>& fn) {
      std::unique_lock lock(mu);
      job = &fn;
      done = false;
      cv.notify_all();
      cv.wait(lock, [this] { return done; });
    }
    void stop() {
      {
        std::lock_guard lock(mu);
        quit = true;
        cv.notify_all();
      }
      thread.join();
    }
  };
  std::vector<std::unique_ptr<Worker>> workers_;
  std::size_t next_ = 0;
};

// Writes a buffer larger than the core's caches before a call (the "cold" rows): the launch then
// runs with the driver's state evicted, as after a request's parsing and bookkeeping.
class CacheEvictor {
 public:
  void evict() { std::fill(junk_.begin(), junk_.end(), ++value_); }

 private:
  std::vector<char> junk_ = std::vector<char>(std::size_t{64} << 20);
  char value_ = 0;
};

// How the host side of a run differs: a gate opened after the launch (the run's work must begin
// with the gate's wait), the launch on rotating threads, the caches evicted first.
struct HostSide {
  kernels::LaunchGate* gate = nullptr;
  StreamWaitGate* stream_wait = nullptr;  // closed before the outer event, opened with `gate`
  RotatingThreads* threads = nullptr;
  CacheEvictor* evictor = nullptr;
};
Medians time_runs(cudaStream_t stream, Timer& t, const Options& o, bool busy, bool has_inner,
                  const std::function<bool()>& run, double idle_us = 0, bool asleep = false,
                  HostSide host = {}) {
  kernels::LaunchGate* gate = host.gate;
  StreamWaitGate* stream_wait = host.stream_wait;
  std::vector<double> inner, outer, launch, wall;
  const auto spin_ns = static_cast<unsigned long long>(o.spin_us * 1e3);
  for (int i = 0; i < o.warmup + o.reps; ++i) {
    if (busy) spin_kernel<<<1, 1, 0, stream>>>(spin_ns);
    if (!busy && idle_us > 0) host_wait(idle_us, asleep);
    if (stream_wait != nullptr && !stream_wait->close(stream)) return {};
    cudaEventRecord(t.outer0.get(), stream);
    std::chrono::steady_clock::time_point before, after, synced;
    bool ran = false, sync_ok = false;
    const std::function<void()> call = [&] {
      if (host.evictor != nullptr) host.evictor->evict();
      before = std::chrono::steady_clock::now();
      ran = run();
      after = std::chrono::steady_clock::now();
      cudaEventRecord(t.outer1.get(), stream);
      if (gate != nullptr) gate->open();
      if (stream_wait != nullptr) stream_wait->open();
      sync_ok = ran && cudaEventSynchronize(t.outer1.get()) == cudaSuccess;
      synced = std::chrono::steady_clock::now();
    };
    if (host.threads != nullptr) {
      host.threads->run(call);
    } else {
      call();
    }
    if (!ran || !sync_ok) return {};
    if (i < o.warmup) continue;
    outer.push_back(elapsed_us(t.outer0.get(), t.outer1.get()));
    launch.push_back(std::chrono::duration<double, std::micro>(after - before).count());
    wall.push_back(std::chrono::duration<double, std::micro>(synced - before).count());
    if (has_inner) inner.push_back(elapsed_us(t.inner0.get(), t.inner1.get()));
  }
  return {has_inner ? median(inner) : -1, median(outer), median(launch), median(wall)};
}

struct Row {
  std::string case_name, mode;
  Medians m;
};

// Points g's problem at device pointer arrays of its own strided batch (kept in *arrays).
bool use_pointer_arrays(SquareGemm& g, cudaStream_t stream, kernels::DeviceBuffer* arrays) {
  kernels::GemmBatch& b = g.problem.batch;
  const auto count = static_cast<std::size_t>(b.count);
  const std::size_t size = kernels::dtype_size(g.problem.in_type);
  const std::size_t out_size = kernels::dtype_size(g.problem.out_type);
  std::vector<const void*> host(3 * count);
  for (std::size_t i = 0; i < count; ++i) {
    host[i] = static_cast<const std::byte*>(g.problem.a) + i * b.stride_a * size;
    host[count + i] = static_cast<const std::byte*>(g.problem.b) + i * b.stride_b * size;
    host[2 * count + i] = static_cast<std::byte*>(g.problem.c) + i * b.stride_c * out_size;
  }
  absl::StatusOr<kernels::DeviceBuffer> device =
      kernels::allocate_device(host.size() * sizeof(void*));
  if (!device.ok()) return false;
  *arrays = *std::move(device);
  if (cudaMemcpyAsync(arrays->data(), host.data(), host.size() * sizeof(void*),
                      cudaMemcpyHostToDevice, stream) != cudaSuccess ||
      cudaStreamSynchronize(stream) != cudaSuccess) {
    return false;
  }
  auto* base = static_cast<void**>(arrays->data());
  b.stride_a = b.stride_b = b.stride_c = 0;
  b.a_array = const_cast<const void* const*>(base);
  b.b_array = const_cast<const void* const*>(base + count);
  b.c_array = base + 2 * count;
  b.arrays_aligned16 = std::all_of(host.begin(), host.end(), [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  });
  return true;
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  if (kernels::cuda_device_count() == 0) {
    std::fprintf(stderr, "graph_timing: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  auto resources = kernels::StreamResources::create();
  auto e0 = kernels::create_event(), e1 = kernels::create_event();
  auto e2 = kernels::create_event(), e3 = kernels::create_event();
  if (!resources.ok() || !e0.ok() || !e1.ok() || !e2.ok() || !e3.ok()) {
    std::fprintf(stderr, "graph_timing: could not create a stream and events\n");
    return 1;
  }
  Timer t{*std::move(e0), *std::move(e1), *std::move(e2), *std::move(e3)};
  cudaStream_t stream = resources->stream();
  const kernels::GemmVariant* v = kernels::find_gemm_variant(o.variant);
  if (v == nullptr) {
    std::fprintf(stderr, "graph_timing: no variant %s\n", o.variant.c_str());
    return 2;
  }
  const auto record_inner = [&](cudaEvent_t e) {
    return cudaEventRecordWithFlags(e, stream, cudaEventRecordExternal) == cudaSuccess;
  };
  absl::StatusOr<kernels::LaunchGate> gate = kernels::LaunchGate::create();
  if (!gate.ok()) {
    std::fprintf(stderr, "graph_timing: no launch gate: %s\n", gate.status().ToString().c_str());
    return 1;
  }
  RotatingThreads rotating(8);
  StreamWaitGate stream_wait;
  CacheEvictor evictor;
  std::vector<Row> rows;
  for (const std::string& prec_name : o.precisions) {
    const auto prec = kernels::parse_precision_name(prec_name);
    if (!prec.ok()) continue;
    // The operands the kernel reads: fp64 data for fp64, else fp32 data as the precision
    // narrows it (fp16 and bf16 operands for those).
    const kernels::DType dt = kernels::kernel_operand_dtype(
        *prec == kernels::Precision::kF64 ? kernels::DType::kF64 : kernels::DType::kF32, *prec);
    for (const std::int64_t n : o.sizes) {
      absl::StatusOr<SquareGemm> g = make_square_gemm(n, dt, *prec, stream, o.batch);
      if (!g.ok() || !kernels::check_gemm_variant(*v, g->problem).ok()) continue;
      // --batch-arrays: the same strided layout, given as device pointer arrays (as the server
      // passes resident matrices that are not evenly spaced, and kept results).
      kernels::DeviceBuffer arrays;
      if (o.batch > 1 && o.batch_arrays && !use_pointer_arrays(*g, stream, &arrays)) continue;
      // The operands' bytes on the host, copied in before the kernel in the "copied in" mode.
      const std::size_t operand_bytes =
          static_cast<std::size_t>(n * n * o.batch) * kernels::dtype_size(dt);
      absl::StatusOr<kernels::PinnedBuffer> host_operands =
          kernels::allocate_pinned(2 * operand_bytes);
      if (!host_operands.ok()) continue;
      cudaStreamSynchronize(stream);
      const kernels::GemmProblem& p = g->problem;
      const std::string name = prec_name + " " +
                               (o.batch > 1 ? std::to_string(o.batch) + " x " : std::string()) +
                               std::to_string(n) + "^3";
      const auto gemm = [&] { return v->launch(p, resources->context()).ok(); };
      const auto gemm_with_events = [&] {
        return record_inner(t.inner0.get()) && gemm() && record_inner(t.inner1.get());
      };
      const auto direct_with_events = [&] {
        return cudaEventRecord(t.inner0.get(), stream) == cudaSuccess && gemm() &&
               cudaEventRecord(t.inner1.get(), stream) == cudaSuccess;
      };
      const auto gated_graph_work = [&] {
        return gate->enqueue_wait(stream).ok() && gemm_with_events();
      };
      const auto gated_copied_in = [&] {
        const auto* host = static_cast<const std::byte*>(host_operands->data());
        return gate->enqueue_wait(stream).ok() &&
               cudaMemcpyAsync(g->a.data(), host, operand_bytes, cudaMemcpyHostToDevice, stream) ==
                   cudaSuccess &&
               cudaMemcpyAsync(g->b.data(), host + operand_bytes, operand_bytes,
                               cudaMemcpyHostToDevice, stream) == cudaSuccess &&
               gemm_with_events();
      };
      const auto gated_direct = [&] {
        return gate->enqueue_wait(stream).ok() && direct_with_events();
      };
      const auto empty_with_events = [&] {
        if (!record_inner(t.inner0.get())) return false;
        empty_kernel<<<1, 32, 0, stream>>>();
        return record_inner(t.inner1.get());
      };
      CapturedGraph plain, with_events, empty, with_gate, copied_in;
      if (!capture(stream, gemm, &plain) || !capture(stream, gemm_with_events, &with_events) ||
          !capture(stream, empty_with_events, &empty) ||
          !capture(stream, gated_graph_work, &with_gate) ||
          !capture(stream, gated_copied_in, &copied_in)) {
        std::fprintf(stderr, "graph_timing: %s: capture failed\n", name.c_str());
        continue;
      }
      const auto launch = [&](cudaGraphExec_t exec) {
        return [exec, stream] { return cudaGraphLaunch(exec, stream) == cudaSuccess; };
      };
      const std::size_t first_row = rows.size();
      rows.push_back({name, "direct, busy", time_runs(stream, t, o, true, false, gemm)});
      rows.push_back(
          {name, "graph, busy", time_runs(stream, t, o, true, false, launch(plain.exec))});
      rows.push_back({name, "graph+events, busy",
                      time_runs(stream, t, o, true, true, launch(with_events.exec))});
      rows.push_back({name, "graph+events, idle (server)",
                      time_runs(stream, t, o, false, true, launch(with_events.exec))});
      rows.push_back({name, "empty graph+events, idle",
                      time_runs(stream, t, o, false, true, launch(empty.exec))});
      rows.push_back({name, "empty graph+events, busy",
                      time_runs(stream, t, o, true, true, launch(empty.exec))});
      rows.push_back(
          {name, "graph+events, idle, gated",
           time_runs(stream, t, o, false, true, launch(with_gate.exec), 0, false, {&*gate})});
      rows.push_back(
          {name, "graph+events, idle, gated, operands copied in",
           time_runs(stream, t, o, false, true, launch(copied_in.exec), 0, false, {&*gate})});
      rows.push_back({name, "direct+events, idle, gated",
                      time_runs(stream, t, o, false, true, gated_direct, 0, false, {&*gate})});
      rows.push_back({name, "graph+events, idle, 8 threads",
                      time_runs(stream, t, o, false, true, launch(with_events.exec), 0, false,
                                {nullptr, nullptr, &rotating})});
      rows.push_back({name, "graph+events, idle, cold",
                      time_runs(stream, t, o, false, true, launch(with_events.exec), 0, false,
                                {nullptr, nullptr, nullptr, &evictor})});
      rows.push_back({name, "graph+events, 8 threads, cold",
                      time_runs(stream, t, o, false, true, launch(with_events.exec), 0, false,
                                {nullptr, nullptr, &rotating, &evictor})});
      rows.push_back({name, "graph+events, 8 threads, cold, gated",
                      time_runs(stream, t, o, false, true, launch(with_gate.exec), 0, false,
                                {&*gate, nullptr, &rotating, &evictor})});
      if (stream_wait.ok()) {
        rows.push_back({name, "graph+events, idle, stream wait",
                        time_runs(stream, t, o, false, true, launch(with_events.exec), 0, false,
                                  {nullptr, &stream_wait})});
        rows.push_back({name, "graph+events, 8 threads, cold, stream wait",
                        time_runs(stream, t, o, false, true, launch(with_events.exec), 0, false,
                                  {nullptr, &stream_wait, &rotating, &evictor})});
      }
      rows.push_back(
          {name, "direct+events, idle", time_runs(stream, t, o, false, true, direct_with_events)});
      for (const double idle : o.idle_us) {
        char mode[64];
        std::snprintf(mode, sizeof mode, "graph+events, idle %.0f us", idle);
        rows.push_back(
            {name, mode, time_runs(stream, t, o, false, true, launch(with_events.exec), idle)});
        std::snprintf(mode, sizeof mode, "graph+events, asleep %.0f us", idle);
        rows.push_back(
            {name, mode,
             time_runs(stream, t, o, false, true, launch(with_events.exec), idle, true)});
      }
      for (std::size_t i = first_row; i < rows.size(); ++i) {
        std::fprintf(
            stderr,
            "[graph_timing] %-10s %-36s inner %7.2f outer %7.2f launch %7.2f wall %7.2f us\n",
            rows[i].case_name.c_str(), rows[i].mode.c_str(), rows[i].m.inner, rows[i].m.outer,
            rows[i].m.launch, rows[i].m.wall);
      }
    }
  }
  std::ostringstream md;
  md << "# graph_timing: " << prop.name << ", variant " << o.variant << "\n\nmedians of " << o.reps
     << " runs after " << o.warmup << ", spin " << o.spin_us
     << " us; inner = events inside the graph, outer = events on the stream around it (us)\n\n"
        "| case | mode | inner us | outer us | host launch us | host wall us "
        "|\n|---|---|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    char line[256];
    std::snprintf(line, sizeof line, "| %s | %s | %.2f | %.2f | %.2f | %.2f |\n",
                  r.case_name.c_str(), r.mode.c_str(), r.m.inner, r.m.outer, r.m.launch, r.m.wall);
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
