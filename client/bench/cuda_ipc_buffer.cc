// matserve-bench's CUDA IPC buffer: see cuda_ipc_buffer.h.
#include "client/bench/cuda_ipc_buffer.h"

#include <utility>

#include "absl/strings/str_cat.h"

#ifdef MATSERVE_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace matserve::client::bench {

#ifdef MATSERVE_HAVE_CUDA
namespace {

absl::Status check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

}  // namespace

absl::StatusOr<CudaIpcBuffer> CudaIpcBuffer::create(std::size_t bytes, int ordinal) {
  CudaIpcBuffer b;
  if (absl::Status s = check(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
  if (absl::Status s = check(cudaMalloc(&b.device_, bytes), "cudaMalloc"); !s.ok()) return s;
  b.bytes_ = bytes;
  b.ordinal_ = ordinal;
  cudaIpcMemHandle_t h;
  if (absl::Status s = check(cudaIpcGetMemHandle(&h, b.device_), "cudaIpcGetMemHandle"); !s.ok()) {
    return s;
  }
  b.handle_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  return b;
}

absl::Status CudaIpcBuffer::write(std::size_t offset, const void* data, std::size_t n) {
  if (absl::Status s = check(cudaSetDevice(ordinal_), "cudaSetDevice"); !s.ok()) return s;
  return check(cudaMemcpy(static_cast<char*>(device_) + offset, data, n, cudaMemcpyHostToDevice),
               "cudaMemcpy");
}

void CudaIpcBuffer::free() {
  if (device_ != nullptr) {
    cudaSetDevice(ordinal_);
    cudaFree(device_);
  }
  device_ = nullptr;
}
#else
absl::StatusOr<CudaIpcBuffer> CudaIpcBuffer::create(std::size_t /*bytes*/, int /*ordinal*/) {
  return absl::UnimplementedError("cuda-ipc: this matserve-bench was built without CUDA");
}

absl::Status CudaIpcBuffer::write(std::size_t, const void*, std::size_t) {
  return absl::UnimplementedError("cuda-ipc: this matserve-bench was built without CUDA");
}

void CudaIpcBuffer::free() {
  device_ = nullptr;
}
#endif

CudaIpcBuffer::~CudaIpcBuffer() {
  free();
}

CudaIpcBuffer& CudaIpcBuffer::operator=(CudaIpcBuffer&& o) noexcept {
  if (this != &o) {
    free();
    device_ = std::exchange(o.device_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    ordinal_ = o.ordinal_;
    handle_ = std::move(o.handle_);
  }
  return *this;
}

}  // namespace matserve::client::bench
