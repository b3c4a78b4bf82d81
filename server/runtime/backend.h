// The interface every compute backend implements (CUDA, CPU): describe its devices; run one GEMM or
// transpose, choosing the variant on the exact problem the kernel will see; and keep matrices
// resident in its memory between calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/registry.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/jobs.h"
#include "server/runtime/memory_pool.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {

class PinnedHeap;

// Device memory of another process, opened for this one (CUDA IPC): where it lives and what keeps
// it open.
struct OpenedDeviceMemory {
  int device = -1;    // the backend's device index
  std::string label;  // "cuda:0"
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  std::shared_ptr<void> keep;  // closes the mapping when the last holder lets go
};

struct DeviceDescription {
  int index = 0;
  std::string name;                // "NVIDIA H100 80GB HBM3", or the CPU's model
  std::string compute_capability;  // "9.0"; empty on the CPU
  std::int64_t memory_total_bytes = 0;
  std::int64_t memory_free_bytes = 0;
  int multiprocessors = 0;
  std::int64_t memory_budget_bytes = 0;     // what requests and resident matrices may use
  std::int64_t budget_requested_bytes = 0;  // --memory_budget_bytes when it was clamped, else 0
};

// Per-device runtime numbers, for metrics and tests.
struct DeviceStats {
  std::string label;  // "cuda:0", "cpu"
  PoolStats pool;
  SchedulerStats scheduler;
  std::int64_t staging_pinned_bytes = 0;
};

// Picks the variant for the problem as the kernel will see it (device pointers included).
using GemmChooser =
    std::function<absl::StatusOr<const kernels::GemmVariant*>(const kernels::GemmProblem&)>;
using TransposeChooser = std::function<absl::StatusOr<const kernels::TransposeVariant*>(
    const kernels::TransposeProblem&)>;

class Backend {
 public:
  virtual ~Backend() = default;

  virtual kernels::Backend kind() const = 0;
  virtual std::vector<DeviceDescription> devices() const = 0;
  virtual std::vector<DeviceStats> stats() const = 0;
  // False after an unrecoverable device error: health reports NOT_SERVING.
  virtual bool healthy() const = 0;

  // Runs the job: `out` receives job.out_bytes() bytes in job.out_layout, unless
  // job.keep_result (then `out` is empty and outcome.result is set). Waits for admission until the
  // waiter gives up. Fills `outcome` except verification.
  virtual absl::Status multiply(const GemmJob& job, const GemmChooser& choose,
                                std::span<std::byte> out, const Waiter& waiter,
                                Outcome& outcome) = 0;
  // Every product of `job` in one launch (the chooser sees the batched problem): results into
  // job.outs, or, with keep_result, into new resident matrices (outcome.results, in order).
  // Fills `outcome` for the whole batch, except verification.
  virtual absl::Status multiply_batch(const GemmBatchJob& job, const GemmChooser& choose,
                                      const Waiter& waiter, Outcome& outcome) = 0;
  // Out-of-place, or in place on job.a's resident memory when job.in_place (the caller swaps the
  // resident matrix's shape afterwards).
  virtual absl::Status transpose(const TransposeJob& job, const TransposeChooser& choose,
                                 std::span<std::byte> out, const Waiter& waiter,
                                 Outcome& outcome) = 0;

  // Resident memory: allocated on the least-loaded device (or `device` when >= 0), unfilled.
  virtual absl::StatusOr<std::shared_ptr<ResidentMatrix>> create_resident(
      std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
      int device, const Waiter& waiter) = 0;
  virtual absl::Status write_resident(ResidentMatrix& m, std::size_t offset,
                                      std::span<const std::byte> bytes, const Waiter& waiter) = 0;
  virtual absl::Status read_resident(ResidentMatrix& m, std::size_t offset,
                                     std::span<std::byte> out, const Waiter& waiter) = 0;

  // Pins host memory (a shared-memory region) so that copies between it and the devices go by
  // DMA with no staging copy, until the returned object goes away. nullptr when the backend has
  // no use for it or pinning failed: the memory is then used as it is.
  virtual std::shared_ptr<void> pin_host_memory(std::span<std::byte> /*bytes*/) { return nullptr; }

  // The pool of pinned host memory holding resident matrices too large for a device
  // (cuda_host_matrices.h); nullopt where there is none (the CPU backend, or
  // --max_host_matrix_bytes=0).
  virtual std::optional<PoolStats> host_matrix_stats() const { return std::nullopt; }

  // Pinned host memory the backend set aside for the process's large message buffers
  // (--pinned_message_bytes), or nullptr. The backend owns it; main.cc installs it as the
  // process's message heap (message_memory.h) for as long as the backend lives.
  virtual PinnedHeap* message_heap() { return nullptr; }

  // Opens device memory another process on this node exported (a cudaIpcMemHandle_t's bytes).
  // FAILED_PRECONDITION on a backend without CUDA devices.
  virtual absl::StatusOr<OpenedDeviceMemory> open_ipc_memory(
      std::span<const std::byte> /*handle*/) {
    return absl::FailedPreconditionError(
        "ipc_handle: CUDA memory needs a server on the CUDA backend (this one computes on the "
        "CPU)");
  }
};

}  // namespace matserve::server
