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

}  // namespace matserve::server
