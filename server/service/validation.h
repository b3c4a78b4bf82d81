// Request validation: every field checked against the API's rules and the server's limits before
// anything is allocated, with INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for size limits) and a
// message naming the field and the limit. A valid request becomes a runtime job whose matrices
// are views into the request's bytes (no copy).
#pragma once

#include "absl/status/statusor.h"
#include "matserve/v1/matrix_service.pb.h"
#include "server/runtime/jobs.h"
#include "server/service/limits.h"

namespace matserve::server {

// The job views into `request`: it must outlive the job.
absl::StatusOr<GemmJob> validate_multiply(const v1::MultiplyRequest& request,
                                          const ServiceLimits& limits);
absl::StatusOr<TransposeJob> validate_transpose(const v1::TransposeRequest& request,
                                                const ServiceLimits& limits);

}  // namespace matserve::server
