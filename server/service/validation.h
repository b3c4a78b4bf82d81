// Request validation: every field checked against the API's rules and the server's limits
// (limits.h; the limits' own start-up checks are in limits.cc) before anything is allocated, with
// INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for size limits) and a message naming the field and the
// limit. A valid request becomes a runtime job whose matrices are views into the request's bytes
// (no copy); the handles and shared-memory places it names are resolved through
// operand_resolution.h.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "matserve/v1/matrix_service.pb.h"
#include "server/runtime/jobs.h"
#include "server/runtime/resident_store.h"
#include "server/runtime/shared_memory_regions.h"
#include "server/service/limits.h"

namespace matserve::server {

// Finds the resident matrix a handle names (NOT_FOUND naming `field` when there is none).
using HandleResolver = std::function<absl::StatusOr<std::shared_ptr<ResidentMatrix>>(
    const std::string& field, const std::string& handle)>;

// Finds the caller's shared-memory region `name` (NOT_FOUND naming `field` when there is none,
// FAILED_PRECONDITION when shared memory is off or the region was truncated).
using RegionResolver = std::function<absl::StatusOr<std::shared_ptr<SharedMemoryRegion>>(
    const std::string& field, const std::string& name)>;

// The job views into `request`, which must outlive it. Resident operands are locked for the
// job's lifetime (shared; exclusive for an in-place transpose) in creation order
// (ResidentMatrix::serial, then address: operand_resolution.h), so that concurrent requests
// cannot deadlock. Operands and results in shared memory (Matrix.shm, output_shm) are found with
// `regions` and held by the job; with `regions` null every such place is refused as
// INVALID_ARGUMENT naming the field ("shared memory is for Upload, Multiply and Transpose").
absl::StatusOr<GemmJob> validate_multiply(const v1::MultiplyRequest& request,
                                          const ServiceLimits& limits,
                                          const HandleResolver& resolve,
                                          const RegionResolver* regions = nullptr);
// A batch: each operand's products as views into `request` (or locked resident matrices, or
// shared memory), the options as for Multiply; with output_shm, batch.outs holds the one place
// of all the results; an inline result is placed by the caller.
absl::StatusOr<GemmBatchJob> validate_multiply_batched(const v1::MultiplyBatchedRequest& request,
                                                       const ServiceLimits& limits,
                                                       const HandleResolver& resolve,
                                                       const RegionResolver* regions = nullptr);
absl::StatusOr<TransposeJob> validate_transpose(const v1::TransposeRequest& request,
                                                const ServiceLimits& limits,
                                                const HandleResolver& resolve,
                                                const RegionResolver* regions = nullptr);

// A whole matrix (Upload), named `field` in messages. With `regions` its bytes may be at a place
// in a host shared-memory region (Matrix.shm; with `regions` null, INVALID_ARGUMENT); `hold` then
// keeps the region mapped for as long as the caller needs the bytes.
absl::StatusOr<HostMatrix> validate_matrix(const std::string& field, const v1::Matrix& m,
                                           const ServiceLimits& limits,
                                           const RegionResolver* regions = nullptr,
                                           std::shared_ptr<SharedMemoryRegion>* hold = nullptr);
// The header of a streamed upload: everything but the data, which arrives in chunks.
absl::StatusOr<HostMatrix> validate_header(const std::string& field, const v1::Matrix& m,
                                           const ServiceLimits& limits);

}  // namespace matserve::server
