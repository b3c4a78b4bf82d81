// RAII owners for the CUDA resources matserve uses: device buffers, pinned host buffers, streams,
// events and cuBLAS/cuBLASLt handles. Move-only; each frees what it owns exactly once.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {

// Owns one handle value, released by Free(value) when non-null.
template <typename T, auto Free>
class CudaOwned {
 public:
  CudaOwned() = default;
  explicit CudaOwned(T v) : v_(v) {}
  CudaOwned(CudaOwned&& o) noexcept : v_(std::exchange(o.v_, T{})) {}
  CudaOwned& operator=(CudaOwned&& o) noexcept {
    if (this != &o) {
      reset();
      v_ = std::exchange(o.v_, T{});
    }
    return *this;
  }
  CudaOwned(const CudaOwned&) = delete;
  CudaOwned& operator=(const CudaOwned&) = delete;
  ~CudaOwned() { reset(); }

  T get() const { return v_; }
  explicit operator bool() const { return v_ != T{}; }
  void reset() {
    if (v_ != T{}) Free(v_);
    v_ = T{};
  }

 private:
  T v_{};
};

namespace detail {
inline void free_device(void* p) {
  cudaFree(p);
}
inline void free_host(void* p) {
  cudaFreeHost(p);
}
inline void destroy_stream(cudaStream_t s) {
  cudaStreamDestroy(s);
}
inline void destroy_event(cudaEvent_t e) {
  cudaEventDestroy(e);
}
inline void destroy_cublas(cublasHandle_t h) {
  cublasDestroy(h);
}
inline void destroy_cublaslt(cublasLtHandle_t h) {
  cublasLtDestroy(h);
}
}  // namespace detail

// A byte buffer in device memory (cudaMalloc) or pinned host memory (cudaMallocHost).
template <auto Free>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(void* p, std::size_t bytes) : ptr_(p), bytes_(bytes) {}
  void* data() const { return ptr_.get(); }
  std::size_t size() const { return bytes_; }

 private:
  CudaOwned<void*, Free> ptr_;
  std::size_t bytes_ = 0;
};

using DeviceBuffer = CudaBuffer<&detail::free_device>;
using PinnedBuffer = CudaBuffer<&detail::free_host>;
using Stream = CudaOwned<cudaStream_t, &detail::destroy_stream>;
using Event = CudaOwned<cudaEvent_t, &detail::destroy_event>;
using CublasHandle = CudaOwned<cublasHandle_t, &detail::destroy_cublas>;
using CublasLtHandle = CudaOwned<cublasLtHandle_t, &detail::destroy_cublaslt>;

inline absl::StatusOr<DeviceBuffer> allocate_device(std::size_t bytes) {
  void* p = nullptr;
  if (absl::Status s = cuda_status(cudaMalloc(&p, bytes == 0 ? 1 : bytes), "cudaMalloc"); !s.ok()) {
    return s;
  }
  return DeviceBuffer(p, bytes);
}

inline absl::StatusOr<PinnedBuffer> allocate_pinned(std::size_t bytes) {
  void* p = nullptr;
  if (absl::Status s = cuda_status(cudaMallocHost(&p, bytes == 0 ? 1 : bytes), "cudaMallocHost");
      !s.ok()) {
    return s;
  }
  return PinnedBuffer(p, bytes);
}

inline absl::StatusOr<Stream> create_stream() {
  cudaStream_t s = nullptr;
  if (absl::Status st =
          cuda_status(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
      !st.ok()) {
    return st;
  }
  return Stream(s);
}

inline absl::StatusOr<Event> create_event() {
  cudaEvent_t e = nullptr;
  if (absl::Status st = cuda_status(cudaEventCreate(&e), "cudaEventCreate"); !st.ok()) return st;
  return Event(e);
}

inline absl::StatusOr<CublasHandle> create_cublas() {
  cublasHandle_t h = nullptr;
  if (absl::Status st = cublas_status(cublasCreate(&h), "cublasCreate"); !st.ok()) return st;
  return CublasHandle(h);
}

inline absl::StatusOr<CublasLtHandle> create_cublaslt() {
  cublasLtHandle_t h = nullptr;
  if (absl::Status st = cublas_status(cublasLtCreate(&h), "cublasLtCreate"); !st.ok()) return st;
  return CublasLtHandle(h);
}

}  // namespace matserve::kernels
