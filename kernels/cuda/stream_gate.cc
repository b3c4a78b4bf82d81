// Stream gate: see stream_gate.h.
#include "kernels/cuda/stream_gate.h"

#include <atomic>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/gate_wait.h"

namespace matserve::kernels {

absl::StatusOr<StreamGate> StreamGate::create() {
  absl::StatusOr<PinnedBuffer> word = allocate_pinned(sizeof(unsigned int));
  if (!word.ok()) return word.status();
  *static_cast<unsigned int*>(word->data()) = 0;
  void* device = nullptr;
  if (absl::Status s = cuda_status(cudaHostGetDevicePointer(&device, word->data(), 0),
                                   "cudaHostGetDevicePointer");
      !s.ok()) {
    return s;
  }
  return StreamGate(*std::move(word), static_cast<const unsigned int*>(device));
}

absl::StatusOr<StreamGate::Hold> StreamGate::close(cudaStream_t stream) {
  const unsigned int value = last_ + 1;
  if (absl::Status s = cuda_status(launch_gate_wait(device_word_, value, stream), "gate wait");
      !s.ok()) {
    return s;
  }
  last_ = value;
  return Hold(this, value);
}

void StreamGate::Hold::open() {
  if (gate_ == nullptr) return;
  std::atomic_ref<unsigned int>(*gate_->host_word()).store(value_, std::memory_order_release);
  gate_ = nullptr;
}

}  // namespace matserve::kernels
