// The interface every compute backend implements (CUDA, CPU): describe its devices, and run one
// GEMM or transpose with a variant the runtime already chose, writing into the caller's buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "kernels/registry.h"
#include "server/runtime/jobs.h"

namespace matserve::server {

struct DeviceDescription {
  int index = 0;
  std::string name;                // "NVIDIA H100 80GB HBM3", or the CPU's model
  std::string compute_capability;  // "9.0"; empty on the CPU
  std::int64_t memory_total_bytes = 0;
  std::int64_t memory_free_bytes = 0;
  int multiprocessors = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual kernels::Backend kind() const = 0;
  virtual std::vector<DeviceDescription> devices() const = 0;
  // False after an unrecoverable device error: health reports NOT_SERVING.
  virtual bool healthy() const = 0;

  // Runs `v` on `job`, writing job.out_bytes() bytes into `out` in job.out_layout. Waits for a
  // free execution slot until `deadline` (DEADLINE_EXCEEDED after it). Fills `outcome` except
  // verification.
  virtual absl::Status multiply(const GemmJob& job, const kernels::GemmVariant& v,
                                std::span<std::byte> out, absl::Time deadline,
                                Outcome& outcome) = 0;
  virtual absl::Status transpose(const TransposeJob& job, const kernels::TransposeVariant& v,
                                 std::span<std::byte> out, absl::Time deadline,
                                 Outcome& outcome) = 0;
};

}  // namespace matserve::server
