// Pinned host memory for resident matrices too large for a device: see cuda_host_matrices.h.
#include "server/runtime/cuda_host_matrices.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace matserve::server {

CudaHostMatrices::CudaHostMatrices(std::int64_t limit_bytes) {
  if (limit_bytes <= 0) return;
  pool_ = std::make_unique<MemoryPool>(
      RawAllocator{
          .name = "pinned host memory for matrices too large for the device "
                  "(--max_host_matrix_bytes)",
          .allocate = [](std::size_t bytes) -> void* {
            void* p = nullptr;
            if (cudaMallocHost(&p, bytes) != cudaSuccess) {
              cudaGetLastError();  // an allocation failure is not sticky; clear it
              return nullptr;
            }
            return p;
          },
          .release = [](void* p) { cudaFreeHost(p); },
      },
      limit_bytes);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CudaHostMatrices::create(std::int64_t rows,
                                                                         std::int64_t cols,
                                                                         kernels::DType dtype,
                                                                         kernels::Layout layout) {
  if (pool_ == nullptr) {
    return absl::ResourceExhaustedError(
        "no host memory for matrices too large for the device (--max_host_matrix_bytes=0)");
  }
  const auto bytes = static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  absl::StatusOr<MemoryPool::Block> block = pool_->allocate(bytes, /*long_lived=*/true);
  if (!block.ok()) return block.status();
  std::shared_ptr<ResidentMatrix> m =
      make_resident(*std::move(block), rows, cols, dtype, layout, "", /*device=*/-1, "host");
  m->in_host_memory = true;
  return m;
}

}  // namespace matserve::server
