// A stream gate's wait: one thread polls a word of mapped pinned host memory until the host has
// written the awaited value. The loads are volatile (uncached, over PCIe, about a microsecond
// each) and spaced by __nanosleep, so the waiting thread takes one warp slot on one SM and
// almost no memory traffic; work behind it in the stream starts the moment it returns.
#include "kernels/cuda/gate_wait.h"

namespace matserve::kernels {
namespace {

__global__ void gate_wait_kernel(const volatile unsigned int* flag, unsigned int value) {
  // Signed difference: correct across the wrap of the 32-bit counter.
  while (static_cast<int>(*flag - value) < 0) __nanosleep(256);
}

}  // namespace

cudaError_t launch_gate_wait(const unsigned int* flag, unsigned int value, cudaStream_t stream) {
  gate_wait_kernel<<<1, 1, 0, stream>>>(flag, value);
  return cudaGetLastError();
}

}  // namespace matserve::kernels
