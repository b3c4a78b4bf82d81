// store_alignment: what a misaligned global access costs, on its own. Copies 8191 x 8193 fp32
// (256 MiB) with 4-byte element accesses, coalesced (a warp moves 32 consecutive elements), with
// the source and / or the destination shifted by one element off its 32-byte sectors, beside
// cudaMemcpy and a 16-byte copy of the same bytes. A transpose of a matrix whose rows are not
// 16-byte aligned meets exactly these shifts; the numbers say which side the transpose should
// keep on sector boundaries (kernels/transpose/vector_tile.cuh, the skewed tile).
// Medians of --reps calls after --warmup, CUDA events.
//
// usage: store_alignment [--warmup=5] [--reps=50]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_args.h"

namespace {

constexpr std::size_t kElems = std::size_t{8191} * 8193;
constexpr int kUnroll = 8;  // loads in flight per thread

__global__ void copy16(const float4* __restrict__ in, float4* __restrict__ out, std::size_t n4) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n4; i += stride) {
    out[i] = __ldg(in + i);
  }
}

__global__ void copy4(const float* __restrict__ in, float* __restrict__ out, std::size_t n) {
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += stride * kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = i + u * stride < n ? __ldg(in + i + u * stride) : 0.f;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < n) out[i + u * stride] = v[u];
    }
  }
}

struct DeviceBuffer {  // RAII for the two copy buffers
  explicit DeviceBuffer(std::size_t bytes) { ok = cudaMalloc(&ptr, bytes) == cudaSuccess; }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  float* data() const { return static_cast<float*>(ptr); }
  void* ptr = nullptr;
  bool ok = false;
};

struct Events {
  Events() {
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
  }
  ~Events() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  Events(const Events&) = delete;
  Events& operator=(const Events&) = delete;
  cudaEvent_t start{}, stop{};
};

}  // namespace

int main(int argc, char** argv) {
  int warmup = 5, reps = 50;
  for (int i = 1; i < argc; ++i) {
    std::string key, value;
    if (!matserve::bench::key_value(argv[i], &key, &value) || (key != "warmup" && key != "reps")) {
      std::fprintf(stderr, "usage: store_alignment [--warmup=5] [--reps=50]\n");
      return 2;
    }
    (key == "warmup" ? warmup : reps) = std::max(key == "warmup" ? 0 : 1, std::stoi(value));
  }
  const std::size_t bytes = (kElems + 64) * sizeof(float);
  DeviceBuffer a(bytes), b(bytes);
  if (!a.ok || !b.ok || cudaMemset(a.ptr, 1, bytes) != cudaSuccess) {
    std::fprintf(stderr, "store_alignment: no CUDA device or not enough memory\n");
    return 1;
  }
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  Events ev;
  double memcpy_gbs = 0;
  std::printf(
      "| copy of 8191 x 8193 fp32 | us | GB/s | share of cudaMemcpy |\n|---|---:|---:|---:|\n");
  const auto time = [&](const char* name, auto&& launch) {
    std::vector<double> ms;
    for (int i = 0; i < warmup + reps; ++i) {
      cudaEventRecord(ev.start);
      launch();
      cudaEventRecord(ev.stop);
      cudaEventSynchronize(ev.stop);
      float t = 0;
      cudaEventElapsedTime(&t, ev.start, ev.stop);
      if (i >= warmup) ms.push_back(t);
    }
    const double med = matserve::bench::median(ms);
    const double gbs = 2.0 * kElems * sizeof(float) / (med * 1e-3) / 1e9;
    if (memcpy_gbs == 0) memcpy_gbs = gbs;
    std::printf("| %s | %.1f | %.0f | %.1f%% |\n", name, med * 1e3, gbs, 100 * gbs / memcpy_gbs);
  };
  time("cudaMemcpy device to device",
       [&] { cudaMemcpyAsync(b.ptr, a.ptr, kElems * sizeof(float), cudaMemcpyDeviceToDevice); });
  time("16-byte accesses, aligned", [&] {
    copy16<<<sms * 8, 256>>>(reinterpret_cast<const float4*>(a.data()),
                             reinterpret_cast<float4*>(b.data()), kElems / 4);
  });
  const char* names[2][2] = {
      {"4-byte accesses, both aligned", "4-byte accesses, destination off by one element"},
      {"4-byte accesses, source off by one element", "4-byte accesses, both off by one element"}};
  for (int in_off : {0, 1}) {
    for (int out_off : {0, 1}) {
      time(names[in_off][out_off],
           [&] { copy4<<<sms * 8, 256>>>(a.data() + in_off, b.data() + out_off, kElems); });
    }
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "store_alignment: %s\n", cudaGetErrorString(err));
    return 1;
  }
  return 0;
}
