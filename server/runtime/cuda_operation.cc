// The steps the CUDA operations share: see cuda_operation.h.
#include "server/runtime/cuda_operation.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::server {

absl::StatusOr<DeviceScheduler*> CudaOperation::pick_device(
    std::span<const Operand* const> operands, const ResidentMatrix* device_out) {
  absl::StatusOr<CudaDevice*> picked = context_.pick(operands);
  if (!picked.ok()) return picked.status();
  device_ = *picked;
  if (device_out != nullptr && device_out->device != device_->index) {
    return absl::FailedPreconditionError(absl::StrCat(
        "output_shm: the result's CUDA memory is on ", device_out->device_label,
        ", the operation runs on ", device_->label, " (keep operands and result on one GPU)"));
  }
  return device_->scheduler.get();
}

absl::Status CudaOperation::bind_slot(const AdmittedMemory& memory) {
  if (absl::Status s = kernels::cuda_status(cudaSetDevice(device_->ordinal), "cudaSetDevice");
      !s.ok()) {
    return s;
  }
  slot_ = &device_->slots[static_cast<std::size_t>(memory.slot())];
  stream_ = slot_->resources.stream();
  return absl::OkStatus();
}

absl::Status CudaOperation::launch_device_work(const kernels::LaunchKey* graph_key,
                                               absl::FunctionRef<absl::Status()> work,
                                               Outcome& outcome) {
  const bool capturable = graph_key != nullptr;
  // Under capture an event is recorded as an external node; outside one, a plain record costs
  // one call less.
  const auto record = [this, capturable](cudaEvent_t event) {
    return capturable ? kernels::LaunchGraphs::record_event(event, stream_)
                      : kernels::cuda_status(cudaEventRecord(event, stream_), "record event");
  };
  // Only work that could be captured is gated: the rest (a product split over GPUs, out of core,
  // fp8 scales read back mid-call) may wait on the host within its enqueue, which would then
  // wait out the gate's bound.
  kernels::LaunchGate* gate = capturable && slot_->gate ? &*slot_->gate : nullptr;
  const auto enqueue = [&]() -> absl::Status {
    // With --gate_launches the device holds here until the host has enqueued the rest.
    if (gate != nullptr) {
      if (absl::Status s = gate->enqueue_wait(stream_); !s.ok()) return s;
    }
    if (absl::Status s = record(events().kernel_begin.get()); !s.ok()) return s;
    if (absl::Status s = work(); !s.ok()) return s;
    return record(events().kernel_end.get());
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<kernels::LaunchGraphs::Prepared> graph =
      capturable ? slot_->graphs.prepare(*graph_key, stream_, enqueue)
                 : kernels::LaunchGraphs::Prepared{};
  if (!graph.ok()) return graph.status();
  if (capturable) outcome.marks.mark(graph->captured_now ? "graph_capture" : "graph_lookup");
  absl::Status launched;
  if (graph->exec != nullptr) {
    launched = kernels::LaunchGraphs::launch(graph->exec, stream_);
    outcome.launch_path = graph->captured_now ? "graph_captured" : "graph_replayed";
  } else {
    launched = enqueue();
    outcome.launch_path = "direct";
  }
  // Every command of the call is enqueued (or the enqueue failed): let the device go.
  if (gate != nullptr) gate->open();
  if (!launched.ok()) return launched;
  outcome.times.launch_us = micros_since(start);
  return absl::OkStatus();
}

absl::Status CudaOperation::copy_result_out(const void* result, std::size_t bytes,
                                            const ResidentMatrix* device_out,
                                            std::span<std::byte> host, bool to_host,
                                            Outcome& outcome) {
  const absl::Time start = absl::Now();
  if (device_out != nullptr) {
    if (absl::Status s =
            kernels::cuda_status(cudaMemcpyAsync(device_out->block.data(), result, bytes,
                                                 cudaMemcpyDeviceToDevice, stream_),
                                 "result to CUDA memory");
        !s.ok()) {
      return s;
    }
  } else if (to_host) {
    if (absl::Status s = slot_->staging.to_host(host.data(), result, bytes, stream_, copier());
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = finish(); !s.ok()) return s;
  outcome.times.device_to_host_us = to_host ? micros_since(start) : 0.0;
  return absl::OkStatus();
}

absl::Status CudaOperation::wait_kernel() {
  if (cudaEventSynchronize(events().kernel_end.get()) != cudaSuccess) return finish();
  return absl::OkStatus();
}

absl::Status CudaOperation::finish() {
  return finish_stream_work(stream_, device_->healthy);
}

void CudaOperation::abandon() {
  if (stream_ != nullptr) (void)finish();
}

void CudaOperation::record_device_times(bool copied_in, Outcome& outcome) const {
  outcome.times.host_to_device_us =
      copied_in ? elapsed_us(events().copy_in_begin.get(), events().copy_in_end.get()) : 0.0;
  outcome.times.kernel_us = elapsed_us(events().kernel_begin.get(), events().kernel_end.get());
}

}  // namespace matserve::server
