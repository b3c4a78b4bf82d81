// The CUDA backend: every selected GPU with a pool of streams (each with its own cuBLAS handles,
// workspace and timing events); a request takes the least-loaded GPU and a free stream, copies its
// operands in, runs the chosen variant, copies the result out, and times each stage with events.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "server/runtime/backend.h"

namespace matserve::server {

struct CudaBackendOptions {
  std::vector<int> devices;  // CUDA ordinals; empty = every visible device
  int streams_per_device = 4;
};

class CudaBackend final : public Backend {
 public:
  // FAILED_PRECONDITION when no device is visible or a named one does not exist.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  kernels::Backend kind() const override { return kernels::Backend::kCuda; }
  std::vector<DeviceDescription> devices() const override;
  bool healthy() const override;
  absl::Status multiply(const GemmJob& job, const kernels::GemmVariant& v,
                        std::span<std::byte> out, absl::Time deadline, Outcome& outcome) override;
  absl::Status transpose(const TransposeJob& job, const kernels::TransposeVariant& v,
                         std::span<std::byte> out, absl::Time deadline, Outcome& outcome) override;

 private:
  struct StreamSlot;
  struct Device;
  class Lease;

  CudaBackend() = default;
  // The least-loaded healthy device, and a free stream on it (waits until `deadline`).
  absl::StatusOr<Lease> acquire(absl::Time deadline);

  std::vector<std::unique_ptr<Device>> devices_;
};

}  // namespace matserve::server
