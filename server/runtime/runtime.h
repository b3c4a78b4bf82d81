// The runtime façade the service calls: chooses the variant, runs the job on the backend, and
// verifies the result against the float64 reference when asked.
#pragma once

#include <memory>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/runtime/backend.h"
#include "server/runtime/jobs.h"
#include "server/runtime/variant_selection.h"

namespace matserve::server {

class Runtime {
 public:
  Runtime(std::unique_ptr<Backend> backend, TunedChoice tuned);

  // `out` must hold job.out_bytes(). `variant` is a registry name, "auto" or empty.
  absl::Status multiply(const GemmJob& job, std::string_view variant, std::span<std::byte> out,
                        absl::Time deadline, Outcome& outcome);
  absl::Status transpose(const TransposeJob& job, std::string_view variant,
                         std::span<std::byte> out, absl::Time deadline, Outcome& outcome);

  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

 private:
  std::unique_ptr<Backend> backend_;
  SelectionContext selection_;
};

}  // namespace matserve::server
