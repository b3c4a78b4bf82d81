// CPU backend: see cpu_backend.h. Its operations run through the execution plan
// (cpu_operations.h). Timings: queue = waiting for admission; kernel = the variant's run; the copy
// stages are zero (the data never leaves host memory).
#include "server/runtime/cpu_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/openblas_gemm.h"
#include "server/runtime/cpu_operations.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

std::string read_cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (absl::StartsWith(line, "model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

// A quarter of the memory the process may use (the host's, or its cgroup's limit) by default,
// at most 90% of it.
MemoryBudget cpu_memory_budget(std::int64_t requested, const HostLimits& host) {
  return choose_memory_budget(requested, host.memory_bytes, 0.25, 0.9);
}

RawAllocator host_allocator() {
  return RawAllocator{
      .name = "cpu memory",
      .allocate = [](std::size_t bytes) { return std::aligned_alloc(256, bytes); },
      .release = [](void* p) { std::free(p); },
  };
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : cpu_name_(read_cpu_model()),
      host_(options.host ? *options.host : read_host_limits()),
      budget_(cpu_memory_budget(options.memory_budget_bytes, host_)),
      budget_requested_(budget_.clamped ? options.memory_budget_bytes : 0),
      pool_(host_allocator(), budget_.bytes),
      scheduler_("cpu", options.concurrency, options.max_queue, pool_) {
  blas_threads_ = kernels::set_openblas_threads(host_.cpus);
}

std::vector<DeviceDescription> CpuBackend::devices() const {
  DeviceDescription d;
  d.index = 0;
  d.name = absl::StrCat(cpu_name_, " (", blas_threads_, " threads)");
  d.memory_total_bytes = pool_.budget();
  d.memory_free_bytes = pool_.budget() - pool_.stats().in_use_bytes;
  d.memory_budget_bytes = pool_.budget();
  d.budget_requested_bytes = budget_requested_;
  return {d};
}

std::vector<DeviceStats> CpuBackend::stats() const {
  return {DeviceStats{.label = "cpu", .pool = pool_.stats(), .scheduler = scheduler_.stats()}};
}

absl::Status CpuBackend::multiply(const GemmJob& job, const GemmChooser& choose,
                                  std::span<std::byte> out, const Waiter& waiter,
                                  Outcome& outcome) {
  return run_cpu_gemm(scheduler_, job, choose, out, waiter, outcome);
}

absl::Status CpuBackend::multiply_batch(const GemmBatchJob& job, const GemmChooser& choose,
                                        const Waiter& waiter, Outcome& outcome) {
  return run_cpu_gemm_batch(scheduler_, job, choose, waiter, outcome);
}

absl::Status CpuBackend::transpose(const TransposeJob& job, const TransposeChooser& choose,
                                   std::span<std::byte> out, const Waiter& waiter,
                                   Outcome& outcome) {
  return run_cpu_transpose(scheduler_, job, choose, out, waiter, outcome);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CpuBackend::create_resident(
    std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
    int /*device*/, const Waiter& /*waiter*/) {
  const auto bytes = static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  absl::StatusOr<MemoryPool::Block> block = pool_.allocate(bytes, /*long_lived=*/true);
  if (!block.ok()) return block.status();
  return make_resident(*std::move(block), rows, cols, dtype, layout, "", 0, "cpu");
}

absl::Status CpuBackend::write_resident(ResidentMatrix& m, std::size_t offset,
                                        std::span<const std::byte> bytes,
                                        const Waiter& /*waiter*/) {
  std::memcpy(static_cast<std::byte*>(m.block.data()) + offset, bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status CpuBackend::read_resident(ResidentMatrix& m, std::size_t offset,
                                       std::span<std::byte> out, const Waiter& /*waiter*/) {
  std::memcpy(out.data(), static_cast<const std::byte*>(m.block.data()) + offset, out.size());
  return absl::OkStatus();
}

}  // namespace matserve::server
