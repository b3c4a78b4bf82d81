// Runtime façade: see runtime.h.
#include "server/runtime/runtime.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/reference.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/quote.h"

namespace matserve::server {
namespace {

// Named variants are checked for existence and backend before anything is allocated; the
// problem-dependent checks run later, on the exact problem the kernel would see.
absl::Status precheck_gemm(std::string_view variant, kernels::Backend backend) {
  if (is_auto(variant)) return absl::OkStatus();
  return lookup_gemm_variant(variant, backend).status();
}

absl::Status precheck_transpose(std::string_view variant, kernels::Backend backend) {
  if (is_auto(variant)) return absl::OkStatus();
  return lookup_transpose_variant(variant, backend).status();
}

}  // namespace

Runtime::Runtime(std::unique_ptr<Backend> backend, TunedChoice tuned, absl::Duration resident_ttl,
                 BatchingOptions batching)
    : backend_(std::move(backend)),
      residents_(resident_ttl),
      batcher_(
          batching,
          [this](const GemmBatchJob& job, std::string_view variant, const Waiter& waiter,
                 Outcome& outcome) {
            return backend_->multiply_batch(job, gemm_chooser(variant), waiter, outcome);
          },
          [this](const GemmJob& job, std::string_view variant, std::span<std::byte> out,
                 const Waiter& waiter, Outcome& outcome) {
            return backend_->multiply(job, gemm_chooser(variant), out, waiter, outcome);
          }) {
  selection_.backend = backend_->kind();
  selection_.tuned = std::move(tuned);
  sweeper_ = std::thread([this] {
    while (!stopping_.WaitForNotificationWithTimeout(absl::Milliseconds(200))) residents_.sweep();
  });
}

Runtime::~Runtime() {
  stopping_.Notify();
  sweeper_.join();
  residents_.clear();
}

absl::StatusOr<std::span<const std::byte>> Runtime::host_bytes(const Operand& o,
                                                               std::vector<std::byte>& storage,
                                                               const Waiter& waiter) {
  if (!o.is_resident()) return o.data;
  storage.resize(o.bytes());
  if (absl::Status s = backend_->read_resident(*o.resident, o.offset, storage, waiter); !s.ok())
    return s;
  return std::span<const std::byte>(storage);
}

GemmChooser Runtime::gemm_chooser(std::string_view variant) const {
  return [this, variant](const kernels::GemmProblem& p) {
    return select_gemm_variant(variant, p, selection_);
  };
}

absl::StatusOr<kernels::ErrorStats> Runtime::verify_product(
    const GemmOptions& options, const Operand& a, const Operand& b, const Operand* c,
    std::span<std::byte> got, ResidentMatrix* kept, std::size_t kept_offset, const Waiter& waiter) {
  std::vector<std::byte> a_storage, b_storage, c_storage;
  absl::StatusOr<std::span<const std::byte>> ha = host_bytes(a, a_storage, waiter);
  if (!ha.ok()) return ha.status();
  absl::StatusOr<std::span<const std::byte>> hb = host_bytes(b, b_storage, waiter);
  if (!hb.ok()) return hb.status();
  const void* c0 = nullptr;
  if (c != nullptr && options.beta != 0.0) {
    absl::StatusOr<std::span<const std::byte>> hc = host_bytes(*c, c_storage, waiter);
    if (!hc.ok()) return hc.status();
    c0 = hc->data();
  }
  std::vector<std::byte> result;
  if (kept != nullptr) {
    result.resize(options.out_bytes(a, b));
    if (absl::Status s = backend_->read_resident(*kept, kept_offset, result, waiter); !s.ok()) {
      return s;
    }
    got = result;
  }
  const kernels::GemmProblem host =
      gemm_problem(options, a, b, c != nullptr, a.dtype, ha->data(), hb->data(), got.data());
  const std::vector<double> ref = kernels::reference_gemm(host, c0);
  return kernels::compare_with_reference(got.data(), options.out_dtype, host.m, host.n, host.ldc,
                                         ref);
}

absl::Status Runtime::multiply(const GemmJob& job, std::string_view variant,
                               std::span<std::byte> out, const Waiter& waiter, Outcome& outcome) {
  if (absl::Status s = precheck_gemm(variant, selection_.backend); !s.ok()) return s;
  const std::optional<std::string> key = batcher_.key(job, variant);
  absl::Status ran = key.has_value()
                         ? batcher_.run(*key, job, variant, out, waiter, outcome)
                         : backend_->multiply(job, gemm_chooser(variant), out, waiter, outcome);
  if (!ran.ok()) return ran;
  if (job.verify) {
    absl::StatusOr<HostBudget::Lease> lease = verify_budget_.acquire(job.verify_bytes, waiter);
    if (!lease.ok()) return lease.status();
    absl::StatusOr<kernels::ErrorStats> e =
        verify_product(job, job.a, job.b, job.c ? &*job.c : nullptr, out,
                       job.keep_result ? outcome.result.get() : nullptr, 0, waiter);
    if (!e.ok()) return e.status();
    outcome.verification = *e;
  }
  return absl::OkStatus();
}

absl::Status Runtime::multiply_batch(const GemmBatchJob& job, std::string_view variant,
                                     const Waiter& waiter, Outcome& outcome) {
  if (absl::Status s = precheck_gemm(variant, selection_.backend); !s.ok()) return s;
  if (absl::Status s = backend_->multiply_batch(job, gemm_chooser(variant), waiter, outcome);
      !s.ok()) {
    return s;
  }
  if (job.shape.verify) {
    absl::StatusOr<HostBudget::Lease> lease =
        verify_budget_.acquire(job.shape.verify_bytes, waiter);
    if (!lease.ok()) return lease.status();
    kernels::ErrorStats worst;
    for (std::int64_t i = 0; i < job.count; ++i) {
      const auto [block, offset] = job.kept_place(i);
      ResidentMatrix* kept = job.shape.keep_result ? outcome.results[block].get() : nullptr;
      absl::StatusOr<kernels::ErrorStats> e = verify_product(
          job.shape, job.a_of(i), job.b_of(i), job.c_of(i), job.out_of(i), kept, offset, waiter);
      if (!e.ok()) return e.status();
      worst.max_abs_error = std::max(worst.max_abs_error, e->max_abs_error);
      worst.rel_l2_error = std::max(worst.rel_l2_error, e->rel_l2_error);
      worst.nonfinite += e->nonfinite;
    }
    outcome.verification = worst;
  }
  return absl::OkStatus();
}

absl::Status Runtime::transpose(const TransposeJob& job, std::string_view variant,
                                std::span<std::byte> out, const Waiter& waiter, Outcome& outcome) {
  if (absl::Status s = precheck_transpose(variant, selection_.backend); !s.ok()) return s;
  // The input for verify, taken before the run (an in-place transpose overwrites it).
  std::vector<std::byte> a_storage;
  std::span<const std::byte> before;
  HostBudget::Lease lease;
  if (job.verify) {
    absl::StatusOr<HostBudget::Lease> got = verify_budget_.acquire(job.verify_bytes, waiter);
    if (!got.ok()) return got.status();
    lease = *std::move(got);
    absl::StatusOr<std::span<const std::byte>> a = host_bytes(job.a, a_storage, waiter);
    if (!a.ok()) return a.status();
    before = *a;
  }
  const TransposeChooser choose = [&](const kernels::TransposeProblem& p) {
    return select_transpose_variant(variant, p, selection_);
  };
  if (absl::Status s = backend_->transpose(job, choose, out, waiter, outcome); !s.ok()) return s;
  if (job.in_place) {
    ResidentMatrix& m = *job.a.resident;  // exclusively locked by the job
    m.drop_transposed();
    m.rows = job.a.cols;
    m.cols = job.a.rows;
    if (outcome.replacement_block) residents_.replace_block(m, outcome.replacement_block);
    outcome.result = job.a.resident;
  }
  if (job.verify) {
    std::vector<std::byte> result;
    std::span<std::byte> got = out;
    if (job.keep_result || job.in_place) {
      result.resize(job.out_bytes());
      if (absl::Status s = backend_->read_resident(*outcome.result, 0, result, waiter); !s.ok()) {
        return s;
      }
      got = result;
    }
    const kernels::TransposeProblem shape = transpose_problem(job, before.data(), got.data());
    const std::vector<double> ref = kernels::reference_transpose(shape);
    outcome.verification = kernels::compare_with_reference(got.data(), job.a.dtype, shape.cols,
                                                           shape.rows, shape.ld_out, ref);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> Runtime::begin_upload(
    std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
    const std::string& owner, int device, const Waiter& waiter) {
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
      backend_->create_resident(rows, cols, dtype, layout, device, waiter);
  if (!m.ok()) return m.status();
  (*m)->owner = owner;
  return m;
}

absl::Status Runtime::write(ResidentMatrix& m, std::size_t offset, std::span<const std::byte> bytes,
                            const Waiter& waiter) {
  return backend_->write_resident(m, offset, bytes, waiter);
}

std::string Runtime::publish(std::shared_ptr<ResidentMatrix> m) {
  return residents_.add(std::move(m));
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> Runtime::create_filling(
    std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
    const std::string& owner, int device, const Waiter& waiter) {
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
      begin_upload(rows, cols, dtype, layout, owner, device, waiter);
  if (!m.ok()) return m.status();
  (*m)->fill = std::make_unique<RangeFill>((*m)->bytes());
  publish(*m);
  return m;
}

absl::StatusOr<bool> Runtime::write_range(const std::shared_ptr<ResidentMatrix>& m,
                                          std::size_t offset, std::span<const std::byte> bytes,
                                          const Waiter& waiter) {
  if (m->fill == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("handle: resident matrix ", quote(m->handle),
                     " was not created by CreateResident; its bytes can no longer change"));
  }
  // In use while the bytes move: the sweep leaves it alone, and its idle time restarts after.
  const ResidentLock lock(m, /*exclusive=*/false);
  if (absl::Status s = m->fill->claim(offset, bytes.size(), m->handle); !s.ok()) return s;
  const absl::Status written = write(*m, offset, bytes, waiter);
  const bool completed = m->fill->finish(offset, bytes.size(), written.ok());
  if (!written.ok()) return written;
  return completed;
}

absl::Status Runtime::read(ResidentMatrix& m, std::size_t offset, std::span<std::byte> out,
                           const Waiter& waiter) {
  return backend_->read_resident(m, offset, out, waiter);
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> Runtime::upload(const HostMatrix& h,
                                                                const std::string& owner,
                                                                int device, const Waiter& waiter) {
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
      begin_upload(h.rows, h.cols, h.dtype, h.layout, owner, device, waiter);
  if (!m.ok()) return m.status();
  if (absl::Status s = write(**m, 0, h.data, waiter); !s.ok()) return s;
  publish(*m);
  return m;
}

}  // namespace matserve::server
