// Everything one CUDA stream needs to run any variant: the stream, its own cuBLAS and cuBLASLt
// handles, and its own library workspace (shared workspaces make results non-deterministic
// across streams). The runtime's stream pool, the GPU tests and the benchmarks all use this.
#pragma once

#include <cstddef>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "kernels/registry.h"

namespace matserve::kernels {

// 32 MiB: what cuBLAS(Lt) wants on Hopper.
inline constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;

class StreamResources {
 public:
  // On the current device.
  static absl::StatusOr<StreamResources> create(
      std::size_t workspace_bytes = kDefaultWorkspaceBytes);

  ExecContext context() const;
  cudaStream_t stream() const { return stream_.get(); }

 private:
  Stream stream_;
  CublasHandle cublas_;
  CublasLtHandle cublaslt_;
  DeviceBuffer workspace_;
};

// Number of CUDA devices usable by this process; 0 when there is no driver or no device.
int cuda_device_count();

}  // namespace matserve::kernels
