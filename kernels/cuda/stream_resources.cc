// Per-stream CUDA resources: see stream_resources.h.
#include "kernels/cuda/stream_resources.h"

#include <cstdint>
#include <utility>

namespace matserve::kernels {
namespace {

// Scratch that kernels take from the current device's stream-ordered pool (cudaMallocAsync: the
// fp8 variant's packed operands) stays in the pool for the next call, up to this much, instead of
// going back to the driver at every synchronization (the pool's default threshold is 0, which
// made each call map its scratch anew: hundreds of microseconds).
constexpr std::uint64_t kPoolKeepBytes = std::uint64_t{1} << 30;

absl::Status keep_pool_memory() {
  int device = 0;
  if (absl::Status s = cuda_status(cudaGetDevice(&device), "cudaGetDevice"); !s.ok()) return s;
  cudaMemPool_t pool = nullptr;
  if (absl::Status s = cuda_status(cudaDeviceGetDefaultMemPool(&pool, device), "default pool");
      !s.ok()) {
    return s;
  }
  std::uint64_t keep = kPoolKeepBytes;
  return cuda_status(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
                     "cudaMemPoolSetAttribute");
}

}  // namespace

absl::StatusOr<StreamResources> StreamResources::create(std::size_t workspace_bytes) {
  if (absl::Status s = keep_pool_memory(); !s.ok()) return s;
  StreamResources r;
  absl::StatusOr<Stream> stream = create_stream();
  if (!stream.ok()) return stream.status();
  r.stream_ = *std::move(stream);
  absl::StatusOr<CublasHandle> cublas = create_cublas();
  if (!cublas.ok()) return cublas.status();
  r.cublas_ = *std::move(cublas);
  absl::StatusOr<CublasLtHandle> lt = create_cublaslt();
  if (!lt.ok()) return lt.status();
  r.cublaslt_ = *std::move(lt);
  absl::StatusOr<DeviceBuffer> ws = allocate_device(workspace_bytes);
  if (!ws.ok()) return ws.status();
  r.workspace_ = *std::move(ws);
  absl::StatusOr<PinnedBuffer> scales =
      allocate_pinned(2 * static_cast<std::size_t>(kFp8ScaleProducts) * sizeof(float));
  if (!scales.ok()) return scales.status();
  r.fp8_scales_ = *std::move(scales);
  if (absl::Status s =
          cublas_status(cublasSetStream(r.cublas_.get(), r.stream_.get()), "cublasSetStream");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = cublas_status(
          cublasSetWorkspace(r.cublas_.get(), r.workspace_.data(), r.workspace_.size()),
          "cublasSetWorkspace");
      !s.ok()) {
    return s;
  }
  return r;
}

ExecContext StreamResources::context() const {
  ExecContext c;
  c.stream = stream_.get();
  c.cublas = cublas_.get();
  c.cublaslt = cublaslt_.get();
  c.workspace = workspace_.data();
  c.workspace_bytes = workspace_.size();
  return c;
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the non-sticky "no device" error
    return 0;
  }
  return n;
}

}  // namespace matserve::kernels
