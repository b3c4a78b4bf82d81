// A resident matrix's bytes copied in (an upload) or out (a download) through the execution plan:
// a stream slot of the matrix's device admitted (no memory: the bytes go straight to or from the
// matrix's block), the host bytes staged through the slot's pinned ring, the stream finished. No
// variant, no kernel: those steps are empty.
#include <cuda_runtime_api.h>

#include "server/runtime/cuda_operation.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

class CudaResidentCopy : public CudaOperation {
 public:
  // Copies `to_device` into the matrix at `offset`, or, when it is empty, the matrix from `offset`
  // into `to_host`.
  CudaResidentCopy(const CudaOperationContext& context, CudaDevice& device, ResidentMatrix& m,
                   std::size_t offset, std::span<const std::byte> to_device,
                   std::span<std::byte> to_host)
      : CudaOperation(context),
        device_picked_(device),
        at_(static_cast<std::byte*>(m.block.data()) + offset),
        to_device_(to_device),
        to_host_(to_host) {}

  // The matrix's device, whatever its health (a sticky error then shows in the copy).
  absl::StatusOr<DeviceScheduler*> pick() {
    device_ = &device_picked_;
    return device_->scheduler.get();
  }
  void plan_memory(BlockPlan& /*plan*/) {}
  absl::Status choose(AdmittedMemory& memory) { return bind_slot(memory); }
  absl::Status stage_in() {
    if (to_device_.empty()) return absl::OkStatus();
    return slot_->staging.to_device(at_, to_device_.data(), to_device_.size(), stream_, copier());
  }
  absl::Status launch(Outcome& /*outcome*/) { return absl::OkStatus(); }
  absl::Status wait_kernel() { return absl::OkStatus(); }
  absl::Status stage_out(Outcome& /*outcome*/) {
    if (!to_host_.empty()) {
      if (absl::Status s =
              slot_->staging.to_host(to_host_.data(), at_, to_host_.size(), stream_, copier());
          !s.ok()) {
        return s;
      }
    }
    return finish();
  }
  void record(Outcome& /*outcome*/) {}
  void keep(AdmittedMemory& /*memory*/, Outcome& /*outcome*/) {}

 private:
  CudaDevice& device_picked_;
  std::byte* const at_;
  const std::span<const std::byte> to_device_;
  const std::span<std::byte> to_host_;
};

}  // namespace

absl::Status run_cuda_resident_write(const CudaOperationContext& context, CudaDevice& device,
                                     ResidentMatrix& m, std::size_t offset,
                                     std::span<const std::byte> from, const Waiter& waiter) {
  CudaResidentCopy op(context, device, m, offset, from, {});
  Outcome outcome;
  return execute(op, waiter, outcome);
}

absl::Status run_cuda_resident_read(const CudaOperationContext& context, CudaDevice& device,
                                    ResidentMatrix& m, std::size_t offset, std::span<std::byte> to,
                                    const Waiter& waiter) {
  CudaResidentCopy op(context, device, m, offset, {}, to);
  Outcome outcome;
  return execute(op, waiter, outcome);
}

}  // namespace matserve::server
