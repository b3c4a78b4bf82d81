// staging_bench: the host-to-device rate of the server's pinned staging ring (StagingRing), the
// piece that moves inline request bytes onto the GPU. For each thread count (the caller plus
// ParallelCopier helpers) it times whole transfers from a pageable buffer (a gRPC message's
// bytes) to device memory and, apart, the host copies alone (no DMA), against one cudaMemcpy
// from pinned memory (the PCIe ceiling) and one from pageable memory. Medians of --reps
// transfers after one warm-up. The server's default --copy_threads comes from this table.
//
// usage: staging_bench [--mib=128] [--threads=1,2,4,6,8,12] [--chunk-mib=2] [--reps=7] [--md=F]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_args.h"
#include "kernels/cuda/resources.h"
#include "server/runtime/cuda_staging.h"
#include "server/runtime/parallel_copy.h"

namespace matserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::size_t bytes = std::size_t{128} << 20;
  std::vector<int> threads = {1, 2, 4, 6, 8, 12};
  std::size_t chunk = std::size_t{2} << 20;
  int reps = 15;
  std::string md;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    std::string name, value;
    if (!key_value(a, &name, &value)) {
      std::fprintf(stderr, "staging_bench: expected --key=value, got '%s'\n", a.c_str());
      return false;
    }
    if (name == "mib") {
      o->bytes = std::stoull(value) << 20;
    } else if (name == "threads") {
      o->threads.clear();
      for (const std::string& t : split_list(value))
        o->threads.push_back(std::max(1, std::stoi(t)));
    } else if (name == "chunk-mib") {
      o->chunk = std::stoull(value) << 20;
    } else if (name == "reps") {
      o->reps = std::max(1, std::stoi(value));
    } else if (name == "md") {
      o->md = value;
    } else {
      std::fprintf(stderr, "staging_bench: unknown option %s\n", a.c_str());
      return false;
    }
  }
  return true;
}

template <typename F>
double median_gbps(std::size_t bytes, int reps, F&& once) {
  once();  // warm-up: first touch, thread start
  std::vector<double> gbps;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    if (!once()) return -1;
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    gbps.push_back(static_cast<double>(bytes) / s / 1e9);
  }
  return median(std::move(gbps));
}

int run(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "staging_bench: no CUDA device\n");
    return 1;
  }
  const int chunks = 2 * (*std::max_element(o.threads.begin(), o.threads.end()) + 1);
  std::vector<char> pageable(o.bytes);
  for (std::size_t i = 0; i < o.bytes; i += 4096) pageable[i] = static_cast<char>(i >> 12);
  auto device = kernels::allocate_device(o.bytes);
  auto pinned = kernels::allocate_pinned(o.bytes);
  auto stream = kernels::create_stream();
  if (!device.ok() || !pinned.ok() || !stream.ok()) {
    std::fprintf(stderr, "staging_bench: allocation failed\n");
    return 1;
  }
  std::memset(pinned->data(), 1, o.bytes);
  const double ceiling = median_gbps(o.bytes, o.reps, [&] {
    return cudaMemcpyAsync(device->data(), pinned->data(), o.bytes, cudaMemcpyHostToDevice,
                           stream->get()) == cudaSuccess &&
           cudaStreamSynchronize(stream->get()) == cudaSuccess;
  });
  const double pageable_rate = median_gbps(o.bytes, o.reps, [&] {
    return cudaMemcpy(device->data(), pageable.data(), o.bytes, cudaMemcpyHostToDevice) ==
           cudaSuccess;
  });
  std::fprintf(stderr, "[staging_bench] %s: pinned cudaMemcpy %.1f GB/s, pageable %.1f GB/s\n",
               prop.name, ceiling, pageable_rate);

  std::ostringstream md;
  md << "# staging_bench: " << prop.name << "\n\n"
     << (o.bytes >> 20) << " MiB per transfer, " << (o.chunk >> 20) << " MiB chunks, ring of "
     << chunks << ", medians of " << o.reps
     << " (GB/s). Ceiling: one cudaMemcpy from pinned memory " << ceiling
     << " GB/s; from pageable memory " << pageable_rate
     << " GB/s.\n\n| threads | host copies alone | to device (copies + DMA) |\n|---:|---:|---:|\n";
  for (const int t : o.threads) {
    server::ParallelCopier copier(t - 1);
    // Host copies alone: every chunk into a ring slot of the pinned buffer, as the ring does.
    const std::size_t n_chunks = (o.bytes + o.chunk - 1) / o.chunk;
    const double host_rate = median_gbps(o.bytes, o.reps, [&] {
      copier.for_each(n_chunks, static_cast<std::size_t>(t - 1), [&](std::size_t j) {
        const std::size_t off = j * o.chunk;
        char* slot = static_cast<char*>(pinned->data()) + (j % chunks) * o.chunk;
        std::memcpy(slot, pageable.data() + off, std::min(o.chunk, o.bytes - off));
      });
      return true;
    });
    absl::StatusOr<server::StagingRing> ring = server::StagingRing::create(o.chunk, chunks);
    if (!ring.ok()) return 1;
    const double device_rate = median_gbps(o.bytes, o.reps, [&] {
      return ring->to_device(device->data(), pageable.data(), o.bytes, stream->get(), copier)
                 .ok() &&
             cudaStreamSynchronize(stream->get()) == cudaSuccess;
    });
    std::fprintf(stderr, "[staging_bench] %2d threads: host copies %.1f, to device %.1f GB/s\n", t,
                 host_rate, device_rate);
    char line[96];
    std::snprintf(line, sizeof line, "| %d | %.1f | %.1f |\n", t, host_rate, device_rate);
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
