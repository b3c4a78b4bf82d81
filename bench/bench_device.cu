// Device helpers for the benchmarks: see bench_device.h. A counter-based hash gives each element
// its value, so a fill needs no state and any size fills in one pass.
#include <cmath>
#include <vector>

#include "bench/bench_args.h"
#include "bench/bench_device.h"

namespace matserve::bench {
namespace {

__device__ __forceinline__ double hashed_value(std::uint64_t i, std::uint64_t seed) {
  std::uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull + 1;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  const double u = static_cast<double>(x >> 11) * 0x1.0p-53;  // [0, 1)
  const double mag = 0.01 + 0.99 * u;
  return (x & 1) ? -mag : mag;
}

template <typename T>
__global__ void fill_kernel(T* out, std::int64_t count, std::uint64_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = static_cast<T>(hashed_value(i, seed));
  }
}

template <typename T>
__global__ void diff_kernel(const T* x, const T* y, std::int64_t count, double* sums) {
  double num = 0.0, den = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const double a = static_cast<double>(x[i]);
    const double b = static_cast<double>(y[i]);
    num += isfinite(a) ? (a - b) * (a - b) : INFINITY;
    den += b * b;
  }
  for (int off = 16; off > 0; off /= 2) {
    num += __shfl_down_sync(0xffffffffu, num, off);
    den += __shfl_down_sync(0xffffffffu, den, off);
  }
  if (threadIdx.x % 32 == 0) {
    atomicAdd(&sums[0], num);
    atomicAdd(&sums[1], den);
  }
}

}  // namespace

cudaError_t fill_random(void* data, kernels::DType t, std::int64_t count, std::uint64_t seed,
                        cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  const unsigned blocks = 132 * 8;
  if (t == kernels::DType::kF64) {
    fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<double*>(data), count, seed);
  } else if (t == kernels::DType::kF32) {
    fill_kernel<<<blocks, 256, 0, stream>>>(static_cast<float*>(data), count, seed);
  } else {
    return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

double rel_l2_diff(const void* x, const void* y, kernels::DType t, std::int64_t count,
                   cudaStream_t stream) {
  double* sums = nullptr;
  if (cudaMallocAsync(&sums, 2 * sizeof(double), stream) != cudaSuccess) return -1.0;
  cudaMemsetAsync(sums, 0, 2 * sizeof(double), stream);
  const unsigned blocks = 132 * 4;
  if (t == kernels::DType::kF64) {
    diff_kernel<<<blocks, 256, 0, stream>>>(static_cast<const double*>(x),
                                            static_cast<const double*>(y), count, sums);
  } else {
    diff_kernel<<<blocks, 256, 0, stream>>>(static_cast<const float*>(x),
                                            static_cast<const float*>(y), count, sums);
  }
  double host[2] = {-1.0, 1.0};
  cudaMemcpyAsync(host, sums, sizeof(host), cudaMemcpyDeviceToHost, stream);
  cudaFreeAsync(sums, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) return -1.0;
  if (host[1] == 0.0) return std::sqrt(host[0]);
  return std::sqrt(host[0] / host[1]);
}

absl::StatusOr<SquareGemm> make_square_gemm(std::int64_t n, kernels::DType dtype,
                                            kernels::Precision precision, cudaStream_t stream,
                                            std::int64_t batch) {
  const std::size_t bytes = static_cast<std::size_t>(n * n * batch) * kernels::dtype_size(dtype);
  SquareGemm g;
  for (kernels::DeviceBuffer* buffer : {&g.a, &g.b, &g.c}) {
    absl::StatusOr<kernels::DeviceBuffer> allocated = kernels::allocate_device(bytes);
    if (!allocated.ok()) return allocated.status();
    *buffer = *std::move(allocated);
  }
  fill_random(g.a.data(), dtype, n * n * batch, 1, stream);
  fill_random(g.b.data(), dtype, n * n * batch, 2, stream);
  kernels::GemmProblem& p = g.problem;
  p.m = p.n = p.k = n;
  p.a = g.a.data();
  p.b = g.b.data();
  p.c = g.c.data();
  p.lda = p.ldb = p.ldc = n;
  p.in_type = p.out_type = dtype;
  p.precision = precision;
  p.batch.count = batch;
  p.batch.stride_a = p.batch.stride_b = p.batch.stride_c = batch > 1 ? n * n : 0;
  return g;
}

double event_time_ms(cudaStream_t stream, int warmup, int reps, const std::function<bool()>& call) {
  auto before = kernels::create_event();
  auto after = kernels::create_event();
  if (!before.ok() || !after.ok()) return -1;
  std::vector<double> ms;
  for (int i = 0; i < warmup + reps; ++i) {
    cudaEventRecord(before->get(), stream);
    if (!call()) return -1;
    cudaEventRecord(after->get(), stream);
    if (cudaEventSynchronize(after->get()) != cudaSuccess) return -1;
    float t = 0;
    cudaEventElapsedTime(&t, before->get(), after->get());
    if (i >= warmup) ms.push_back(t);
  }
  return median(ms);
}

}  // namespace matserve::bench
