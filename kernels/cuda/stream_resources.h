// Everything one CUDA stream needs to run any variant: the stream, its own cuBLAS and cuBLASLt
// handles, and its own library workspace (shared workspaces make results non-deterministic
// across streams). The runtime's stream pool, the GPU tests and the benchmarks all use this.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "kernels/registry.h"

namespace matserve::kernels {

// 32 MiB: what cuBLAS(Lt) wants on Hopper.
inline constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;
// Products whose fp8 dequant scales fit in a stream's pinned scale buffer (fp8_scales()).
inline constexpr std::int64_t kFp8ScaleProducts = 4096;

class StreamResources {
 public:
  // On the current device.
  static absl::StatusOr<StreamResources> create(
      std::size_t workspace_bytes = kDefaultWorkspaceBytes);

  ExecContext context() const;
  cudaStream_t stream() const { return stream_.get(); }
  // Pinned host memory for 2 x kFp8ScaleProducts floats, the stream's own: where an fp8 product
  // on this stream may write its dequant scales (GemmProblem::fp8_scales_out). Its address never
  // changes, so a captured graph writing there stays right when replayed.
  float* fp8_scales() const { return static_cast<float*>(fp8_scales_.data()); }

 private:
  Stream stream_;
  CublasHandle cublas_;
  CublasLtHandle cublaslt_;
  DeviceBuffer workspace_;
  PinnedBuffer fp8_scales_;
};

// Number of CUDA devices usable by this process; 0 when there is no driver or no device.
int cuda_device_count();

}  // namespace matserve::kernels
