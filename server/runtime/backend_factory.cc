// Backend creation: see backend_factory.h.
#include "server/runtime/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "server/runtime/cpu_backend.h"
#ifdef MATSERVE_HAVE_CUDA
#include "kernels/cuda/stream_resources.h"
#include "server/runtime/cuda_backend.h"
#endif

namespace matserve::server {

absl::StatusOr<std::unique_ptr<Backend>> make_backend(const BackendOptions& options) {
  if (options.backend != "auto" && options.backend != "cuda" && options.backend != "cpu") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend: '", options.backend, "' is not one of auto, cuda, cpu"));
  }
  CpuBackendOptions cpu;
  cpu.concurrency = options.cpu_concurrency;
  cpu.memory_budget_bytes = options.memory_budget_bytes;
  cpu.max_queue = options.max_queue;
  cpu.host = options.host;
  if (options.backend == "cpu") return std::make_unique<CpuBackend>(cpu);
#ifdef MATSERVE_HAVE_CUDA
  if (options.backend == "cuda" || kernels::cuda_device_count() > 0) {
    CudaBackendOptions cuda;
    cuda.devices = options.devices;
    cuda.streams_per_device = options.streams_per_device;
    cuda.memory_budget_bytes = options.memory_budget_bytes;
    cuda.max_queue = options.max_queue;
    cuda.copy_threads = options.copy_threads;
    cuda.pinned_message_bytes = options.pinned_message_bytes;
    cuda.launch_graphs_per_stream = options.launch_graphs_per_stream;
    cuda.gate_launches = options.gate_launches;
    cuda.split = options.split;
    cuda.max_host_matrix_bytes = options.max_host_matrix_bytes;
    cuda.out_of_core_tile = options.out_of_core_tile;
    absl::StatusOr<std::unique_ptr<CudaBackend>> b = CudaBackend::create(cuda);
    if (!b.ok()) return b.status();
    return std::unique_ptr<Backend>(*std::move(b));
  }
#else
  if (options.backend == "cuda") {
    return absl::FailedPreconditionError(
        "backend: this matserve was built without CUDA (configure with a CUDA toolkit)");
  }
#endif
  return std::make_unique<CpuBackend>(cpu);
}

}  // namespace matserve::server
