// CUDA IPC memory opened from another process's handle: see ipc_memory.h.
#include "kernels/cuda/ipc_memory.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

// cuMemGetAddressRange through the runtime's driver entry point (no link to libcuda).
using GetAddressRange = int (*)(unsigned long long* base, std::size_t* size,
                                unsigned long long ptr);

GetAddressRange address_range_fn() {
  static GetAddressRange fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return GetAddressRange{nullptr};
    }
    return reinterpret_cast<GetAddressRange>(f);
  }();
  return fn;
}

}  // namespace

absl::StatusOr<IpcMemory> IpcMemory::open(std::span<const std::byte> handle, int ordinal) {
  cudaIpcMemHandle_t h;
  if (handle.size() != sizeof(h)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ipc_handle: ", handle.size(), " bytes, expected ", sizeof(h), " (a cudaIpcMemHandle_t)"));
  }
  std::memcpy(&h, handle.data(), sizeof(h));
  if (absl::Status s = cuda_status(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
  IpcMemory m;
  const cudaError_t e = cudaIpcOpenMemHandle(&m.base_, h, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: the handle was refused, the context is fine
    return absl::InvalidArgumentError(
        absl::StrCat("ipc_handle: the driver cannot open it (", cudaGetErrorName(e),
                     "): it must come from cudaIpcGetMemHandle in another process on this "
                     "node, for memory that is still allocated"));
  }
  m.opened_on_ = ordinal;
  cudaPointerAttributes attr{};
  if (absl::Status s = cuda_status(cudaPointerGetAttributes(&attr, m.base_), "pointer attributes");
      !s.ok()) {
    return s;
  }
  m.ordinal_ = attr.device;
  GetAddressRange range = address_range_fn();
  unsigned long long base = 0;
  std::size_t size = 0;
  if (range == nullptr || range(&base, &size, reinterpret_cast<unsigned long long>(m.base_)) != 0) {
    return absl::InternalError("ipc_handle: cuMemGetAddressRange failed on the opened memory");
  }
  // IPC handles name whole allocations: the opened pointer is the allocation's start.
  m.bytes_ = size - static_cast<std::size_t>(reinterpret_cast<unsigned long long>(m.base_) - base);
  return m;
}

IpcMemory& IpcMemory::operator=(IpcMemory&& o) noexcept {
  if (this != &o) {
    close();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    ordinal_ = std::exchange(o.ordinal_, -1);
    opened_on_ = std::exchange(o.opened_on_, -1);
  }
  return *this;
}

IpcMemory::~IpcMemory() {
  close();
}

void IpcMemory::close() {
  if (base_ == nullptr) return;
  int current = 0;
  cudaGetDevice(&current);
  cudaSetDevice(opened_on_);
  cudaIpcCloseMemHandle(base_);
  cudaSetDevice(current);
  base_ = nullptr;
}

}  // namespace matserve::kernels
