// Device memory another process on this node exported with cudaIpcGetMemHandle, opened in this
// one: the client's allocation, read and written in place (no host copy). Opening maps the whole
// allocation the handle names; its real size comes from the driver, so a range a client claims
// can be checked against it. Move-only; closes the mapping once.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>

#include "absl/status/statusor.h"

namespace matserve::kernels {

class IpcMemory {
 public:
  // Opens `handle` (sizeof(cudaIpcMemHandle_t) bytes) with `ordinal` as the current device (peer
  // access is enabled when the memory lives on another device). INVALID_ARGUMENT for a handle of
  // the wrong length or one the driver refuses (not exported, from this process, already closed).
  static absl::StatusOr<IpcMemory> open(std::span<const std::byte> handle, int ordinal);

  IpcMemory() = default;
  IpcMemory(IpcMemory&& o) noexcept { *this = std::move(o); }
  IpcMemory& operator=(IpcMemory&& o) noexcept;
  IpcMemory(const IpcMemory&) = delete;
  IpcMemory& operator=(const IpcMemory&) = delete;
  ~IpcMemory();

  void* base() const { return base_; }          // start of the exported allocation
  std::size_t bytes() const { return bytes_; }  // its size
  int ordinal() const { return ordinal_; }      // the CUDA device that holds it

 private:
  void close();

  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  int ordinal_ = -1;
  int opened_on_ = -1;  // the current device when it was opened (closed with it current)
};

}  // namespace matserve::kernels
