// matserve-bench's CUDA IPC transport: one device allocation of the bench process holding a
// worker's operands and room for its result, exported with a CUDA IPC handle that the server
// opens (RegisterCudaMemory). Built with CUDA only; elsewhere create() says so.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

namespace matserve::client::bench {

class CudaIpcBuffer {
 public:
  // `bytes` of device memory on CUDA device `ordinal`, exported. UNIMPLEMENTED in a build
  // without CUDA; the CUDA error otherwise.
  static absl::StatusOr<CudaIpcBuffer> create(std::size_t bytes, int ordinal);

  CudaIpcBuffer() = default;
  CudaIpcBuffer(CudaIpcBuffer&& o) noexcept { *this = std::move(o); }
  CudaIpcBuffer& operator=(CudaIpcBuffer&& o) noexcept;
  CudaIpcBuffer(const CudaIpcBuffer&) = delete;
  CudaIpcBuffer& operator=(const CudaIpcBuffer&) = delete;
  ~CudaIpcBuffer();

  // Copies `n` host bytes to `offset`.
  absl::Status write(std::size_t offset, const void* data, std::size_t n);
  const std::string& handle() const { return handle_; }  // the cudaIpcMemHandle_t's bytes
  std::size_t size() const { return bytes_; }

 private:
  void free();

  void* device_ = nullptr;
  std::size_t bytes_ = 0;
  int ordinal_ = 0;
  std::string handle_;
};

}  // namespace matserve::client::bench
