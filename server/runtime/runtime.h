// The runtime façade the service calls: chooses variants, runs jobs on the backend, verifies
// results against the float64 reference when asked, and keeps the resident matrices (handles,
// owners, idle TTL swept in the background, uploads and downloads, streamed or not).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "server/runtime/backend.h"
#include "server/runtime/dynamic_batcher.h"
#include "server/runtime/host_budget.h"
#include "server/runtime/jobs.h"
#include "server/runtime/resident_store.h"
#include "server/runtime/shared_memory_regions.h"
#include "server/runtime/stage_trace.h"
#include "server/runtime/variant_selection.h"

namespace matserve::server {

class Runtime {
 public:
  Runtime(std::unique_ptr<Backend> backend, TunedChoice tuned, absl::Duration resident_ttl,
          BatchingOptions batching = {});
  ~Runtime();  // stops the sweeper, releases every resident matrix

  // `out` holds job.out_bytes() (empty with keep_result). `variant`: a name, "auto" or empty.
  absl::Status multiply(const GemmJob& job, std::string_view variant, std::span<std::byte> out,
                        const Waiter& waiter, Outcome& outcome);
  // Every product of `job` in one launch; with verify, outcome.verification is the largest error
  // over the products.
  absl::Status multiply_batch(const GemmBatchJob& job, std::string_view variant,
                              const Waiter& waiter, Outcome& outcome);
  absl::Status transpose(const TransposeJob& job, std::string_view variant,
                         std::span<std::byte> out, const Waiter& waiter, Outcome& outcome);

  // Resident matrices. `owner` scopes visibility (handles of other owners are NOT_FOUND).
  // `device`: the backend's device index to place the matrix on, or -1 for the least-loaded.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> upload(const HostMatrix& m,
                                                         const std::string& owner, int device,
                                                         const Waiter& waiter);
  // Streaming upload: allocate, then write pieces in order, then publish.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> begin_upload(std::int64_t rows, std::int64_t cols,
                                                               kernels::DType dtype,
                                                               kernels::Layout layout,
                                                               const std::string& owner, int device,
                                                               const Waiter& waiter);
  absl::Status write(ResidentMatrix& m, std::size_t offset, std::span<const std::byte> bytes,
                     const Waiter& waiter);
  std::string publish(std::shared_ptr<ResidentMatrix> m);
  // Ranged transfer: a matrix created empty and published at once under its handle (its memory
  // and the owner's quota held from now on), usable only once write_range has written every
  // byte; released if no range arrives for the store's fill timeout.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> create_filling(
      std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
      const std::string& owner, int device, const Waiter& waiter);
  // Writes `bytes` at `offset` of a matrix made by create_filling (see RangeFill::claim for the
  // ranges refused); true when that range completed it.
  absl::StatusOr<bool> write_range(const std::shared_ptr<ResidentMatrix>& m, std::size_t offset,
                                   std::span<const std::byte> bytes, const Waiter& waiter);
  absl::Status read(ResidentMatrix& m, std::size_t offset, std::span<std::byte> out,
                    const Waiter& waiter);

  ResidentStore& residents() { return residents_; }
  const ResidentStore& residents() const { return residents_; }
  const BatchingOptions& batching() const { return batcher_.options(); }
  // Shared-memory regions registered by clients on this node (pinned by the backend).
  SharedMemoryRegistry& shared_memory() { return shared_memory_; }
  // Host memory the float64 references of `verify` may hold at once (--max_verify_bytes); each
  // verifying job takes its verify_bytes from it before the reference runs, waiting its turn.
  HostBudget& verify_budget() { return verify_budget_; }
  // The host-side stage trace (MATSERVE_TRACE_STAGES=1), off by default.
  StageTrace& trace() { return trace_; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }

 private:
  // An operand's bytes in host memory for the reference: the request's own bytes when inline,
  // a download into `storage` when resident.
  absl::StatusOr<std::span<const std::byte>> host_bytes(const Operand& o,
                                                        std::vector<std::byte>& storage,
                                                        const Waiter& waiter);
  // The float64 reference of one product (A, B, C if any, with `options`) against its result
  // (`got`, or `kept` on the device, from byte `kept_offset` on).
  absl::StatusOr<kernels::ErrorStats> verify_product(const GemmOptions& options, const Operand& a,
                                                     const Operand& b, const Operand* c,
                                                     std::span<std::byte> got, ResidentMatrix* kept,
                                                     std::size_t kept_offset, const Waiter& waiter);
  GemmChooser gemm_chooser(std::string_view variant) const;

  std::unique_ptr<Backend> backend_;
  SelectionContext selection_;
  ResidentStore residents_;
  // After backend_: regions unpin through the backend, so they go first.
  SharedMemoryRegistry shared_memory_{
      [this](std::span<std::byte> bytes) { return backend_->pin_host_memory(bytes); }};
  HostBudget verify_budget_{"--max_verify_bytes"};
  StageTrace trace_{StageTrace::enabled_by_env()};
  DynamicBatcher batcher_;
  absl::Notification stopping_;
  std::thread sweeper_;
};

}  // namespace matserve::server
