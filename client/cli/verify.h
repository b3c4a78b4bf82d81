// Client-side verification for `--check`: recomputes the result from the request's own bytes in
// float64 (kernels/cpu/reference.h, OpenBLAS on the host) and compares the server's reply with it.
#pragma once

#include "absl/status/statusor.h"
#include "kernels/cpu/reference.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client::cli {

// max-abs and relative-L2 error of `c` (the reply's C) against alpha*op(A)*op(B) + beta*C0 from
// `request`. DATA_LOSS when the reply's shape or byte length does not match the request.
absl::StatusOr<kernels::ErrorStats> verify_multiply(const matserve::v1::MultiplyRequest& request,
                                                    const matserve::v1::Matrix& c);

// Same for `b` = scale * A^T.
absl::StatusOr<kernels::ErrorStats> verify_transpose(const matserve::v1::TransposeRequest& request,
                                                     const matserve::v1::Matrix& b);

}  // namespace matserve::client::cli
