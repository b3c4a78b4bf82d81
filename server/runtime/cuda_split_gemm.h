// One GEMM spread over the CUDA backend's devices (the plan: split_plan.h). The home device runs
// its band through the ordinary GEMM operation (cuda_gemm_operation.cc); this file runs the
// helpers' shares. Each helper is admitted without waiting (a helper that is busy or short of
// memory means no split: the product then runs on the home device alone, as before), gets its
// own copy streams, and, behind an event of the home stream (the operands are there), copies its
// operand pieces in the order its tiles use them, runs each tile as soon as its pieces are in, and
// copies each tile's result into the home device's C. The home stream waits for every helper
// before the operation's kernel-end event, so the reply's kernel time covers the whole product.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"
#include "server/runtime/backend.h"
#include "server/runtime/cuda_device.h"
#include "server/runtime/device_scheduler.h"
#include "server/runtime/split_plan.h"

namespace matserve::server {

class HelperShare;

class GemmSplit {
 public:
  // Admits a share on every device of `helpers` for `problem` (on `home`), per `plan`, and
  // chooses each tile's variant. nullopt when a helper is busy, short of memory or refuses a tile
  // (the product then runs on the home device alone); an error only for a CUDA failure.
  static absl::StatusOr<std::optional<GemmSplit>> prepare(const SplitPlan& plan,
                                                          const kernels::GemmProblem& problem,
                                                          CudaDevice& home,
                                                          const std::vector<CudaDevice*>& helpers,
                                                          const GemmChooser& choose);
  GemmSplit(GemmSplit&&) noexcept;
  GemmSplit& operator=(GemmSplit&&) = delete;
  GemmSplit(const GemmSplit&) = delete;
  GemmSplit& operator=(const GemmSplit&) = delete;
  // Waits for the helpers' streams before their memory goes back to their pools.
  ~GemmSplit();

  // The home band, computed in place on the home stream.
  const kernels::GemmProblem& home_problem() const { return home_problem_; }
  // Enqueues every helper's share behind the home stream's work so far (the operands are in
  // place); the home device is current again on return.
  absl::Status start_helpers(cudaStream_t home_stream);
  // Makes the home stream wait for every helper's last copy into C.
  absl::Status join_helpers(cudaStream_t home_stream);
  // After a failure: waits for whatever the helpers had enqueued (the home device is current
  // again on return).
  void wait();
  // "cuda:0+cuda:1", the devices that ran, home first.
  std::string labels() const;

 private:
  GemmSplit(kernels::GemmProblem whole, kernels::GemmProblem home_problem, CudaDevice& home,
            kernels::Event ready);

  kernels::GemmProblem whole_;
  kernels::GemmProblem home_problem_;
  CudaDevice* home_;
  kernels::Event ready_;  // on the home device: operands converted, C copied in
  std::vector<std::unique_ptr<HelperShare>> helpers_;
};

}  // namespace matserve::server
