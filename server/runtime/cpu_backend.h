// The CPU backend: runs the registry's CPU variants (OpenBLAS GEMM, blocked transpose) on host
// memory, with the same admission, memory budget and resident matrices as a GPU, so the whole
// service runs and is tested on machines without one.
#pragma once

#include <optional>

#include "server/runtime/backend.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/memory_pool.h"

namespace matserve::server {

struct CpuBackendOptions {
  int concurrency = 2;  // operations at once (each may use several OpenBLAS threads)
  std::int64_t memory_budget_bytes = 0;  // 0: a quarter of the process's memory limit
  int max_queue = 256;
  std::optional<HostLimits> host;  // the process's CPU and memory limits; unset: read them
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options);

  kernels::Backend kind() const override { return kernels::Backend::kCpu; }
  std::vector<DeviceDescription> devices() const override;
  std::vector<DeviceStats> stats() const override;
  bool healthy() const override { return true; }
  absl::Status multiply(const GemmJob& job, const GemmChooser& choose, std::span<std::byte> out,
                        const Waiter& waiter, Outcome& outcome) override;
  absl::Status multiply_batch(const GemmBatchJob& job, const GemmChooser& choose,
                              const Waiter& waiter, Outcome& outcome) override;
  absl::Status transpose(const TransposeJob& job, const TransposeChooser& choose,
                         std::span<std::byte> out, const Waiter& waiter, Outcome& outcome) override;
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> create_resident(
      std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
      int device, const Waiter& waiter) override;
  absl::Status write_resident(ResidentMatrix& m, std::size_t offset,
                              std::span<const std::byte> bytes, const Waiter& waiter) override;
  absl::Status read_resident(ResidentMatrix& m, std::size_t offset, std::span<std::byte> out,
                             const Waiter& waiter) override;

 private:
  std::string cpu_name_;
  HostLimits host_;
  MemoryBudget budget_;
  std::int64_t budget_requested_;
  int blas_threads_ = 1;
  MemoryPool pool_;
  DeviceScheduler scheduler_;
};

}  // namespace matserve::server
