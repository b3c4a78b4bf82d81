// The CPU backend: runs the registry's CPU variants (OpenBLAS GEMM, blocked transpose) directly on
// the request's bytes, so the whole service runs and is tested on machines without a GPU.
#pragma once

#include "server/runtime/backend.h"
#include "server/runtime/concurrency_limiter.h"

namespace matserve::server {

class CpuBackend final : public Backend {
 public:
  // `concurrency`: operations run at once (each may use several OpenBLAS threads).
  explicit CpuBackend(int concurrency);

  kernels::Backend kind() const override { return kernels::Backend::kCpu; }
  std::vector<DeviceDescription> devices() const override;
  bool healthy() const override { return true; }
  absl::Status multiply(const GemmJob& job, const kernels::GemmVariant& v,
                        std::span<std::byte> out, absl::Time deadline, Outcome& outcome) override;
  absl::Status transpose(const TransposeJob& job, const kernels::TransposeVariant& v,
                         std::span<std::byte> out, absl::Time deadline, Outcome& outcome) override;

 private:
  ConcurrencyLimiter limiter_;
  std::string cpu_name_;
};

}  // namespace matserve::server
