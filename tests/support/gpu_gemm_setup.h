// The set-up the GPU GEMM tests share: a fixture base that skips (visibly) without a GPU and
// holds the stream resources a variant launches with, the GemmProblem of dense row-major operands
// (no pointers yet), and host bytes copied into new device memory, finished before return (the
// variants run on non-blocking streams, which do not wait for cudaMemcpy's legacy stream).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/gemm_problem.h"
#include "kernels/registry.h"

namespace matserve::testing {

// A GPU test fixture (Base: ::testing::Test or ::testing::TestWithParam<Case>): skips when no
// CUDA device is visible, else creates one stream with its library handles.
template <typename Base = ::testing::Test>
class WithGpuStream : public Base {
 protected:
  void SetUp() override {
    if (kernels::cuda_device_count() == 0)
      GTEST_SKIP() << "no CUDA device visible: GPU test not run";
    absl::StatusOr<kernels::StreamResources> r = kernels::StreamResources::create();
    ASSERT_TRUE(r.ok()) << r.status();
    resources_ = std::make_unique<kernels::StreamResources>(*std::move(r));
  }

  std::unique_ptr<kernels::StreamResources> resources_;
};

// op(A) (m x k) * op(B) (k x n) into C (m x n), each stored dense and row-major: A is k x m when
// transposed, B n x k. Pointers unset.
inline kernels::GemmProblem dense_problem(std::int64_t m, std::int64_t n, std::int64_t k,
                                          bool a_trans, bool b_trans, kernels::DType in_type,
                                          kernels::DType out_type, kernels::Precision precision,
                                          double alpha, double beta) {
  kernels::GemmProblem p;
  p.m = m;
  p.n = n;
  p.k = k;
  p.a_trans = a_trans;
  p.lda = a_trans ? m : k;
  p.b_trans = b_trans;
  p.ldb = b_trans ? k : n;
  p.ldc = n;
  p.in_type = in_type;
  p.out_type = out_type;
  p.precision = precision;
  p.alpha = alpha;
  p.beta = beta;
  return p;
}

// `host` in new device memory, the copy finished.
inline absl::StatusOr<kernels::DeviceBuffer> to_device(const std::vector<std::byte>& host) {
  absl::StatusOr<kernels::DeviceBuffer> d = kernels::allocate_device(host.size());
  if (!d.ok()) return d.status();
  if (absl::Status s = kernels::cuda_status(
          cudaMemcpy(d->data(), host.data(), host.size(), cudaMemcpyHostToDevice), "upload");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = kernels::cuda_status(cudaDeviceSynchronize(), "upload"); !s.ok()) return s;
  return d;
}

}  // namespace matserve::testing
