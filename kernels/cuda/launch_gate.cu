// LaunchGate: a one-thread kernel that waits for the host's word; see launch_gate.h.
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/launch_gate.h"

namespace matserve::kernels {
namespace {

__global__ void wait_for_host(volatile std::uint32_t* word, std::uint64_t timeout_ns) {
  std::uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*word != 0) break;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < timeout_ns);
  *word = 0;
  __threadfence_system();
}

}  // namespace

absl::StatusOr<LaunchGate> LaunchGate::create(std::uint64_t timeout_ns) {
  // Pinned memory is mapped into the device's address space (unified addressing).
  absl::StatusOr<PinnedBuffer> word = allocate_pinned(sizeof(std::uint32_t));
  if (!word.ok()) return word.status();
  LaunchGate gate;
  gate.word_ = *std::move(word);
  gate.timeout_ns_ = timeout_ns;
  void* host = gate.word_.data();
  *static_cast<volatile std::uint32_t*>(host) = 0;
  void* device = nullptr;
  if (absl::Status s = cuda_status(cudaHostGetDevicePointer(&device, host, 0),
                                   "cudaHostGetDevicePointer (launch gate)");
      !s.ok()) {
    return s;
  }
  gate.device_word_ = static_cast<std::uint32_t*>(device);
  return gate;
}

absl::Status LaunchGate::enqueue_wait(cudaStream_t stream) const {
  // cudaLaunchKernel returns this launch's own error (a <<<>>> launch leaves it to
  // cudaGetLastError, which may hold an earlier call's).
  volatile std::uint32_t* word = device_word_;
  std::uint64_t timeout_ns = timeout_ns_;
  void* args[] = {&word, &timeout_ns};
  return cuda_status(cudaLaunchKernel(reinterpret_cast<const void*>(&wait_for_host), dim3(1),
                                      dim3(1), args, 0, stream),
                     "launch gate kernel");
}

void LaunchGate::open() {
  __atomic_store_n(static_cast<std::uint32_t*>(word_.data()), 1u, __ATOMIC_RELEASE);
}

}  // namespace matserve::kernels
