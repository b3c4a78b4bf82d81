// CPU backend: see cpu_backend.h. Timings: queue = waiting for a slot; kernel = the variant's
// run; the copy stages are zero (the data never leaves host memory).
#include "server/runtime/cpu_backend.h"

#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

double micros_since(absl::Time t) { return absl::ToDoubleMicroseconds(absl::Now() - t); }

}  // namespace

CpuBackend::CpuBackend(int concurrency) : limiter_(concurrency), cpu_name_(read_cpu_model()) {}

std::vector<DeviceDescription> CpuBackend::devices() const {
  DeviceDescription d;
  d.index = 0;
  d.name = absl::StrCat(cpu_name_, " (", std::thread::hardware_concurrency(), " threads)");
  return {d};
}

absl::Status CpuBackend::multiply(const GemmJob& job, const kernels::GemmVariant& v,
                                  std::span<std::byte> out, absl::Time deadline,
                                  Outcome& outcome) {
  const absl::Time queued = absl::Now();
  if (absl::Status s = limiter_.acquire(deadline); !s.ok()) return s;
  SlotGuard slot(limiter_);
  outcome.times.queue_us = micros_since(queued);
  if (job.c.has_value() && job.beta != 0.0) {
    std::memcpy(out.data(), job.c->data.data(), out.size());
  }
  const kernels::GemmProblem p =
      gemm_problem(job, job.a.dtype, job.a.data.data(), job.b.data.data(), out.data());
  const absl::Time start = absl::Now();
  if (absl::Status s = v.launch(p, kernels::ExecContext{}); !s.ok()) return s;
  outcome.times.kernel_us = micros_since(start);
  outcome.variant = std::string(v.name);
  outcome.device = "cpu";
  outcome.work = kernels::gemm_flops(p);
  return absl::OkStatus();
}

absl::Status CpuBackend::transpose(const TransposeJob& job, const kernels::TransposeVariant& v,
                                   std::span<std::byte> out, absl::Time deadline,
                                   Outcome& outcome) {
  const absl::Time queued = absl::Now();
  if (absl::Status s = limiter_.acquire(deadline); !s.ok()) return s;
  SlotGuard slot(limiter_);
  outcome.times.queue_us = micros_since(queued);
  const kernels::TransposeProblem p = transpose_problem(job, job.a.data.data(), out.data());
  const absl::Time start = absl::Now();
  if (absl::Status s = v.launch(p, kernels::ExecContext{}); !s.ok()) return s;
  outcome.times.kernel_us = micros_since(start);
  outcome.variant = std::string(v.name);
  outcome.device = "cpu";
  outcome.work = kernels::transpose_bytes(p);
  return absl::OkStatus();
}

}  // namespace matserve::server
