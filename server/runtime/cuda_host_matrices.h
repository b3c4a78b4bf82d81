// Resident matrices too large for a device: kept in pinned host memory, within a budget of their
// own (--max_host_matrix_bytes), and multiplied out of core (cuda_out_of_core_gemm.cc), their
// pieces streamed to the device by DMA. A matrix goes there when it would take more than a third
// of its device's budget: then the two operands and the result of a product of such matrices could
// not fit the device together, and a product over them needs room on the device for its tiles.
// The memory comes from a caching pool (memory_pool.h), as device memory does: pinning takes the
// host about half a second a GiB, so a released matrix's memory is kept for the next one of its
// size class (within the budget; cached blocks are freed when a new size needs the room).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/types.h"
#include "server/runtime/memory_pool.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {

class CudaHostMatrices {
 public:
  // `limit_bytes` <= 0: no matrix is kept in host memory (large ones are refused as before).
  explicit CudaHostMatrices(std::int64_t limit_bytes);
  CudaHostMatrices(const CudaHostMatrices&) = delete;
  CudaHostMatrices& operator=(const CudaHostMatrices&) = delete;

  // Whether a matrix of `bytes` belongs in host memory beside a device of `device_budget` bytes.
  bool wants(std::size_t bytes, std::int64_t device_budget) const {
    return pool_ != nullptr && static_cast<std::int64_t>(bytes) > device_budget / 3;
  }
  // A matrix of `bytes` in pinned host memory, unfilled (no owner, no handle yet).
  // RESOURCE_EXHAUSTED naming --max_host_matrix_bytes when it would pass the limit, or when the
  // host cannot pin that much.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> create(std::int64_t rows, std::int64_t cols,
                                                         kernels::DType dtype,
                                                         kernels::Layout layout);
  bool enabled() const { return pool_ != nullptr; }
  PoolStats stats() const { return pool_ != nullptr ? pool_->stats() : PoolStats{}; }

 private:
  std::unique_ptr<MemoryPool> pool_;  // null when no host memory is allowed
};

}  // namespace matserve::server
