// The CUDA backend's operations, each one run through the execution plan (execution_plan.h):
// a GEMM, a batch of GEMMs in one launch, a transpose, a resident matrix's bytes copied in or
// out. CudaOperation holds what their steps share: the device and stream slot the operation runs
// on, how it picks the device, enqueues its device work (replayed as a CUDA graph when it can) and
// finishes or abandons its stream work.
#pragma once

#include <cuda_runtime_api.h>

#include <span>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/launch_graphs.h"
#include "kernels/cuda/stream_resources.h"
#include "server/runtime/backend.h"
#include "server/runtime/cuda_device.h"
#include "server/runtime/cuda_split_gemm.h"
#include "server/runtime/execution_plan.h"
#include "server/runtime/jobs.h"
#include "server/runtime/parallel_copy.h"

namespace matserve::server {

class CudaHostMatrices;

// What the backend lends an operation: how to pick the device for its operands (the one holding
// the resident ones, else the least loaded healthy one), and the helpers that copy through the
// staging rings.
struct CudaOperationContext {
  absl::FunctionRef<absl::StatusOr<CudaDevice*>(std::span<const Operand* const>)> pick;
  ParallelCopier& copier;
  // GEMM: when a product is spread over devices, and every device of the backend (the healthy
  // ones other than the operation's own may help).
  const SplitSettings* split = nullptr;
  std::span<CudaDevice* const> devices;
  // GEMM out of core: where a kept result too large for the device goes (null: nowhere, it stays
  // on the device), and the plan's largest tile.
  CudaHostMatrices* host_matrices = nullptr;
  std::int64_t out_of_core_tile = 8192;
};

absl::Status run_cuda_gemm(const CudaOperationContext& context, const GemmJob& job,
                           const GemmChooser& choose, std::span<std::byte> out,
                           const Waiter& waiter, Outcome& outcome);
// A GEMM whose operands or result are in host memory, tile by tile within the device's budget
// (cuda_out_of_core_gemm.cc).
absl::Status run_cuda_out_of_core_gemm(const CudaOperationContext& context, const GemmJob& job,
                                       const GemmChooser& choose, std::span<std::byte> out,
                                       const Waiter& waiter, Outcome& outcome);
absl::Status run_cuda_gemm_batch(const CudaOperationContext& context, const GemmBatchJob& job,
                                 const GemmChooser& choose, const Waiter& waiter, Outcome& outcome);
absl::Status run_cuda_transpose(const CudaOperationContext& context, const TransposeJob& job,
                                const TransposeChooser& choose, std::span<std::byte> out,
                                const Waiter& waiter, Outcome& outcome);
// Bytes into (`from` to `offset`) or out of (`offset` to `to`) resident matrix `m`'s device
// memory, through a stream slot of its device and its staging ring.
absl::Status run_cuda_resident_write(const CudaOperationContext& context, CudaDevice& device,
                                     ResidentMatrix& m, std::size_t offset,
                                     std::span<const std::byte> from, const Waiter& waiter);
absl::Status run_cuda_resident_read(const CudaOperationContext& context, CudaDevice& device,
                                    ResidentMatrix& m, std::size_t offset, std::span<std::byte> to,
                                    const Waiter& waiter);

// The steps every CUDA operation shares; each operation adds the rest (execution_plan.h).
class CudaOperation {
 public:
  // Waits for the kernel-end event: the device work is done.
  absl::Status wait_kernel();
  // After a failed step: waits for the work already queued (a sticky error marks the device).
  void abandon();

 protected:
  explicit CudaOperation(const CudaOperationContext& context) : context_(context) {}

  // The device for `operands` (null entries skipped); FAILED_PRECONDITION when a result in CUDA
  // memory (`device_out`, may be null) is on another device.
  absl::StatusOr<DeviceScheduler*> pick_device(std::span<const Operand* const> operands,
                                               const ResidentMatrix* device_out);
  // Takes the admitted stream slot on the picked device.
  absl::Status bind_slot(const AdmittedMemory& memory);
  // Launch: enqueues `work` (conversions, the kernels) between the kernel events. Through the
  // slot's graph for `graph_key` when there is one (work that can be captured) and the slot has or
  // can capture it, so the device runs it without waiting for the host's per-kernel setup;
  // directly otherwise, and always when `graph_key` is null. Sets the launch stage's host time (a
  // capture included) and path.
  absl::Status launch_device_work(const kernels::LaunchKey* graph_key,
                                  absl::FunctionRef<absl::Status()> work, Outcome& outcome);
  // Stage out: the result (`bytes` at `result`) into the caller's CUDA memory when `device_out`
  // is set, else into `host` through the staging ring when `to_host`; then waits for the stream.
  // device_to_host_us is that copy's host time when `to_host`, else 0.
  absl::Status copy_result_out(const void* result, std::size_t bytes,
                               const ResidentMatrix* device_out, std::span<std::byte> host,
                               bool to_host, Outcome& outcome);
  // Waits for everything queued on the stream.
  absl::Status finish();
  // The copies-in and kernel intervals from the slot's events (copies in: when they ran).
  void record_device_times(bool copied_in, Outcome& outcome) const;
  // fp8 of data the server quantizes: points `p` at the stream's scale buffer, so the product
  // writes the dequant scales it computes there (when they fit it).
  void ask_fp8_scales(kernels::GemmProblem& p) const {
    if (kernels::quantizes_to_fp8(p) && p.batch.count <= kernels::kFp8ScaleProducts) {
      p.fp8_scales_out = slot_->resources.fp8_scales();
    }
  }
  // After the kernel: the scales `p` asked for, A's and B's per product, into the outcome.
  static void read_fp8_scales(const kernels::GemmProblem& p, Outcome& outcome) {
    if (p.fp8_scales_out == nullptr) return;
    outcome.fp8_scales.assign(p.fp8_scales_out, p.fp8_scales_out + 2 * p.batch.count);
  }

  ParallelCopier& copier() const { return context_.copier; }
  StageEvents& events() const { return slot_->events; }

  CudaOperationContext context_;
  CudaDevice* device_ = nullptr;
  StreamSlot* slot_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace matserve::server
