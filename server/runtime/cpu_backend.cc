// CPU backend: see cpu_backend.h. Timings: queue = waiting for admission; kernel = the variant's
// run; the copy stages are zero for inline operands (the data never leaves host memory).
#include "server/runtime/cpu_backend.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/openblas_gemm.h"
#include "server/runtime/batch_placement.h"
#include "server/runtime/problem_builder.h"

namespace matserve::server {
namespace {

std::string read_cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (absl::StartsWith(line, "model name")) {
      const auto colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

// A quarter of the memory the process may use (the host's, or its cgroup's limit) by default,
// at most 90% of it.
MemoryBudget cpu_memory_budget(std::int64_t requested, const HostLimits& host) {
  return choose_memory_budget(requested, host.memory_bytes, 0.25, 0.9);
}

RawAllocator host_allocator() {
  return RawAllocator{
      .name = "cpu memory",
      .allocate = [](std::size_t bytes) { return std::aligned_alloc(256, bytes); },
      .release = [](void* p) { std::free(p); },
  };
}

const void* bytes_of(const Operand& o) {
  return o.is_resident() ? o.resident->block.data() : o.data.data();
}

// The step every CPU operation ends with: chooses the variant for `p`, runs it on the calling
// thread (the execution slot is held) and records what ran, its time and `work(p)` (FLOPs or
// bytes moved).
template <typename Problem, typename Chooser, typename Work>
absl::Status run_chosen(const Problem& p, const Chooser& choose, Work work, Outcome& outcome) {
  auto v = choose(p);
  if (!v.ok()) return v.status();
  const absl::Time start = absl::Now();
  if (absl::Status s = (*v)->launch(p, kernels::ExecContext{}); !s.ok()) return s;
  outcome.times.kernel_us = micros_since(start);
  outcome.variant = std::string((*v)->name);
  outcome.device = "cpu";
  outcome.work = work(p);
  return absl::OkStatus();
}

}  // namespace

CpuBackend::CpuBackend(const CpuBackendOptions& options)
    : cpu_name_(read_cpu_model()),
      host_(options.host ? *options.host : read_host_limits()),
      budget_(cpu_memory_budget(options.memory_budget_bytes, host_)),
      budget_requested_(budget_.clamped ? options.memory_budget_bytes : 0),
      pool_(host_allocator(), budget_.bytes),
      scheduler_("cpu", options.concurrency, options.max_queue, pool_) {
  blas_threads_ = kernels::set_openblas_threads(host_.cpus);
}

std::vector<DeviceDescription> CpuBackend::devices() const {
  DeviceDescription d;
  d.index = 0;
  d.name = absl::StrCat(cpu_name_, " (", blas_threads_, " threads)");
  d.memory_total_bytes = pool_.budget();
  d.memory_free_bytes = pool_.budget() - pool_.stats().in_use_bytes;
  d.memory_budget_bytes = pool_.budget();
  d.budget_requested_bytes = budget_requested_;
  return {d};
}

std::vector<DeviceStats> CpuBackend::stats() const {
  return {DeviceStats{.label = "cpu", .pool = pool_.stats(), .scheduler = scheduler_.stats()}};
}

absl::Status CpuBackend::multiply(const GemmJob& job, const GemmChooser& choose,
                                  std::span<std::byte> out, const Waiter& waiter,
                                  Outcome& outcome) {
  const absl::Time queued = absl::Now();
  std::vector<BlockSpec> specs;
  if (job.keep_result) specs.push_back({job.out_bytes(), true});
  absl::StatusOr<DeviceScheduler::Admission> admission = scheduler_.admit(specs, waiter);
  if (!admission.ok()) return admission.status();
  outcome.times.queue_us = micros_since(queued);
  void* c = job.keep_result ? admission->block(0).data() : out.data();
  if (job.c.has_value() && job.beta != 0.0) std::memcpy(c, bytes_of(*job.c), job.out_bytes());
  const kernels::GemmProblem p =
      gemm_problem(job, job.a.dtype, bytes_of(job.a), bytes_of(job.b), c);
  const auto flops = [](const kernels::GemmProblem& q) { return kernels::gemm_flops(q); };
  if (absl::Status s = run_chosen(p, choose, flops, outcome); !s.ok()) return s;
  if (job.keep_result) {
    outcome.result = make_resident(admission->take_block(0), job.m(), job.n(), job.out_dtype,
                                   job.out_layout, job.owner, 0, "cpu");
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::multiply_batch(const GemmBatchJob& job, const GemmChooser& choose,
                                        const Waiter& waiter, Outcome& outcome) {
  const absl::Time queued = absl::Now();
  const GemmJob& shape = job.shape;
  const std::size_t out_bytes = shape.out_bytes();
  std::vector<BlockSpec> specs;
  if (shape.keep_result) {
    specs.assign(static_cast<std::size_t>(job.count), BlockSpec{out_bytes, true});
  }
  absl::StatusOr<DeviceScheduler::Admission> admission = scheduler_.admit(specs, waiter);
  if (!admission.ok()) return admission.status();
  outcome.times.queue_us = micros_since(queued);
  ProductPointers ptrs;
  for (const Operand& a : job.a) ptrs.a.push_back(bytes_of(a));
  for (const Operand& b : job.b) ptrs.b.push_back(bytes_of(b));
  for (std::int64_t i = 0; i < job.count; ++i) {
    void* c = shape.keep_result ? admission->block(static_cast<std::size_t>(i)).data()
                                : job.out_of(i).data();
    if (const Operand* c0 = job.c_of(i); c0 != nullptr && shape.beta != 0.0) {
      std::memcpy(c, bytes_of(*c0), out_bytes);
    }
    ptrs.c.push_back(c);
  }
  // Host memory: pointer arrays are read where they are.
  const std::size_t in_elem = kernels::dtype_size(shape.a.dtype);
  const std::optional<kernels::GemmBatch> strided =
      strided_batch(ptrs, in_elem, kernels::dtype_size(shape.out_dtype));
  PointerArrays arrays;
  if (!strided.has_value()) arrays = pointer_arrays(ptrs);
  const kernels::GemmBatch batch =
      strided.has_value() ? *strided : arrays.placed_at(arrays.host.data());
  const kernels::GemmProblem p =
      gemm_problem(shape, shape.a.dtype, ptrs.a[0], ptrs.b[0], ptrs.c[0], batch);
  const auto flops = [](const kernels::GemmProblem& q) { return kernels::gemm_flops(q); };
  if (absl::Status s = run_chosen(p, choose, flops, outcome); !s.ok()) return s;
  if (shape.keep_result) {
    for (std::int64_t i = 0; i < job.count; ++i) {
      outcome.results.push_back(make_resident(admission->take_block(static_cast<std::size_t>(i)),
                                              shape.m(), shape.n(), shape.out_dtype,
                                              shape.out_layout, shape.owner, 0, "cpu"));
    }
  }
  return absl::OkStatus();
}

absl::Status CpuBackend::transpose(const TransposeJob& job, const TransposeChooser& choose,
                                   std::span<std::byte> out, const Waiter& waiter,
                                   Outcome& outcome) {
  const absl::Time queued = absl::Now();
  std::vector<BlockSpec> specs;
  if (job.keep_result) specs.push_back({job.out_bytes(), true});
  absl::StatusOr<DeviceScheduler::Admission> admission = scheduler_.admit(specs, waiter);
  if (!admission.ok()) return admission.status();
  outcome.times.queue_us = micros_since(queued);
  const void* in = bytes_of(job.a);
  void* dst = job.in_place      ? job.a.resident->block.data()
              : job.keep_result ? admission->block(0).data()
                                : out.data();
  const kernels::TransposeProblem p = transpose_problem(job, in, dst);
  const auto bytes = [](const kernels::TransposeProblem& q) { return kernels::transpose_bytes(q); };
  if (absl::Status s = run_chosen(p, choose, bytes, outcome); !s.ok()) return s;
  if (job.keep_result) {
    outcome.result = make_resident(admission->take_block(0), job.a.cols, job.a.rows, job.a.dtype,
                                   job.a.layout, job.owner, 0, "cpu");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CpuBackend::create_resident(
    std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout,
    int /*device*/, const Waiter& /*waiter*/) {
  const auto bytes = static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  absl::StatusOr<MemoryPool::Block> block = pool_.allocate(bytes, /*long_lived=*/true);
  if (!block.ok()) return block.status();
  return make_resident(*std::move(block), rows, cols, dtype, layout, "", 0, "cpu");
}

absl::Status CpuBackend::write_resident(ResidentMatrix& m, std::size_t offset,
                                        std::span<const std::byte> bytes,
                                        const Waiter& /*waiter*/) {
  std::memcpy(static_cast<std::byte*>(m.block.data()) + offset, bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::Status CpuBackend::read_resident(ResidentMatrix& m, std::size_t offset,
                                       std::span<std::byte> out, const Waiter& /*waiter*/) {
  std::memcpy(out.data(), static_cast<const std::byte*>(m.block.data()) + offset, out.size());
  return absl::OkStatus();
}

}  // namespace matserve::server
