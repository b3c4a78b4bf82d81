// The CUDA backend: every selected GPU with its memory pool (budgeted, size-classed, cached), its
// scheduler (one slot per stream, bounded queue, memory admission) and its streams, each with its
// own cuBLAS handles, workspace, timing events and pinned staging ring (cuda_device.h). A request
// runs on the device holding its resident operands, else on the least-loaded one, through the
// execution plan (cuda_operation.h); one large product may be spread over several devices, which
// then reach each other's memory directly where the hardware allows (peer access).
#pragma once

#include <atomic>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "server/runtime/backend.h"
#include "server/runtime/cuda_host_matrices.h"
#include "server/runtime/cuda_split_gemm.h"
#include "server/runtime/parallel_copy.h"
#include "server/runtime/pinned_heap.h"
#include "server/runtime/pinned_ranges.h"

namespace matserve::server {

struct CudaDevice;

struct CudaBackendOptions {
  std::vector<int> devices;  // CUDA ordinals; empty = every visible device
  int streams_per_device = 4;
  std::int64_t memory_budget_bytes = 0;  // per device; 0 = 90% of its memory
  int max_queue = 256;                   // waiting requests per device
  // 2 MiB chunks: small enough that a DMA overlaps the next chunks' host copies, large enough
  // that a cudaMemcpyAsync per chunk costs little; each copying thread (the caller and every
  // helper) keeps one chunk filling and one in flight, so a ring gets at least
  // 2 x (copy_threads + 1) chunks whatever staging_chunks says.
  std::size_t staging_chunk_bytes = std::size_t{2} << 20;
  int staging_chunks = 16;  // per stream
  int copy_threads = 6;     // helpers for host copies into and out of pinned staging
  // Hold each call's stream until its device work is all enqueued (kernels/cuda/launch_gate.h):
  // kernel_us is then the device's time alone, at a few microseconds of latency a call.
  bool gate_launches = false;
  // Pinned host memory for the process's large buffers (message_memory: operands as gRPC parses
  // them, reply results), which reach the device by DMA with no staging copy; 0 = none.
  std::size_t pinned_message_bytes = 0;
  // Each stream captures a request's device work as a CUDA graph when a launch (problem, buffers,
  // scalars, variant) comes a second time and replays it for every later request with it: one
  // driver call instead of the kernel's or library's host-side setup
  // (kernels/cuda/launch_graphs.h). Launches kept per stream, least recently used out first;
  // 0 = launch directly, never capture.
  int launch_graphs_per_stream = 64;
  // One product spread over several devices (cuda_split_gemm.h).
  SplitSettings split;
  // Pinned host memory for resident matrices too large for a device (cuda_host_matrices.h);
  // 0: none, such matrices are refused.
  std::int64_t max_host_matrix_bytes = 0;
  // Products whose operands or result are in host memory run out of core in tiles of at most
  // this many rows and columns (out_of_core_plan.h).
  std::int64_t out_of_core_tile = 8192;
};

class CudaBackend final : public Backend {
 public:
  // FAILED_PRECONDITION when no device is visible or a named one does not exist.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& options);
  ~CudaBackend() override;

  kernels::Backend kind() const override { return kernels::Backend::kCuda; }
  std::vector<DeviceDescription> devices() const override;
  std::vector<DeviceStats> stats() const override;
  bool healthy() const override;
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
  std::shared_ptr<void> pin_host_memory(std::span<std::byte> bytes) override;
  PinnedHeap* message_heap() override { return message_heap_.get(); }
  std::optional<PoolStats> host_matrix_stats() const override {
    if (!host_matrices_->enabled()) return std::nullopt;
    return host_matrices_->stats();
  }
  absl::StatusOr<OpenedDeviceMemory> open_ipc_memory(std::span<const std::byte> handle) override;

 private:
  CudaBackend() = default;
  // The device of the resident operands (all must agree; null entries skipped), or the
  // least-loaded healthy one.
  absl::StatusOr<CudaDevice*> pick(std::span<const Operand* const> operands);
  CudaDevice* least_loaded();
  // Whether `job` runs out of core: an operand is in host memory, its kept result belongs there,
  // or its inline operands and result do not fit the device's budget together.
  bool out_of_core(const GemmJob& job);
  // A host-to-host copy (a matrix in host memory written or read), large ones over the copier's
  // threads.
  void copy_in_parallel(std::byte* to, const std::byte* from, std::size_t bytes);

  // Host memory pinned by pin_host_memory, which the staging rings copy by DMA where it is.
  std::unique_ptr<PinnedRanges> pinned_ranges_ = std::make_unique<PinnedRanges>();
  std::vector<std::unique_ptr<CudaDevice>> devices_;
  std::vector<CudaDevice*> device_list_;  // the same devices, as operations see them
  SplitSettings split_;
  std::unique_ptr<CudaHostMatrices> host_matrices_;
  std::int64_t out_of_core_tile_ = 8192;
  std::unique_ptr<ParallelCopier> copier_;
  kernels::PinnedBuffer message_region_;      // behind message_heap_
  std::unique_ptr<PinnedHeap> message_heap_;  // over message_region_; see message_heap()
};

}  // namespace matserve::server
