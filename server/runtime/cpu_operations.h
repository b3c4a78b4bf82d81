// The CPU backend's operations, each one run through the execution plan (execution_plan.h): a GEMM,
// a batch of GEMMs in one call, a transpose. Everything lives in host memory: inline operands are
// read where the request holds them and results written where the reply wants them, so the copy
// stages are empty and the kernel stage is the variant's run on the calling thread.
#pragma once

#include <span>

#include "absl/status/status.h"
#include "server/runtime/backend.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

absl::Status run_cpu_gemm(DeviceScheduler& scheduler, const GemmJob& job, const GemmChooser& choose,
                          std::span<std::byte> out, const Waiter& waiter, Outcome& outcome);
absl::Status run_cpu_gemm_batch(DeviceScheduler& scheduler, const GemmBatchJob& job,
                                const GemmChooser& choose, const Waiter& waiter, Outcome& outcome);
absl::Status run_cpu_transpose(DeviceScheduler& scheduler, const TransposeJob& job,
                               const TransposeChooser& choose, std::span<std::byte> out,
                               const Waiter& waiter, Outcome& outcome);

}  // namespace matserve::server
