// Conversions between the API's enums/messages and the kernels' and runtime's types.
#pragma once

#include <optional>

#include "kernels/types.h"
#include "matserve/v1/matrix_service.pb.h"
#include "server/runtime/backend.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

std::optional<kernels::DType> from_proto(v1::DataType t);  // nullopt: unspecified or unknown
v1::DataType to_proto(kernels::DType t);
std::optional<kernels::Layout> from_proto(v1::Layout l);
std::optional<kernels::Compute> from_proto(v1::ComputeMode c);

void fill_timing(const StageTimes& t, v1::Timing* out);
void fill_verification(const kernels::ErrorStats& e, v1::Verification* out);
void fill_device(const DeviceDescription& d, v1::DeviceInfo* out);

// An fp8 product's dequant scales, A's and B's.
struct Fp8ScalePair {
  double a = 1.0;
  double b = 1.0;
};
// The dequant scales fp8 product `i` used: `given` (the request's) for e4m3 data; for data the
// server quantized, the ones the outcome reports, or nullopt where the launch could not report
// them (a reply then states none rather than made-up ones).
std::optional<Fp8ScalePair> fp8_scales_used(kernels::DType data, Fp8ScalePair given,
                                            const Outcome& outcome, std::int64_t i);

}  // namespace matserve::server
