// The runtime's view of one operation: host matrices (views into the request's bytes), options,
// and what comes back (the variant and device that ran, stage timings, optional verification).
// No protobuf here: the service translates messages into these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kernels/cpu/reference.h"
#include "kernels/types.h"

namespace matserve::server {

// A dense matrix in host memory, not owned: rows * cols * dtype_size(dtype) bytes.
struct HostMatrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  kernels::DType dtype = kernels::DType::kF32;
  kernels::Layout layout = kernels::Layout::kRowMajor;
  std::span<const std::byte> data;

  std::size_t bytes() const {
    return static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  }
};

struct GemmJob {
  HostMatrix a;
  HostMatrix b;
  std::optional<HostMatrix> c;  // in out_dtype / out_layout; read when beta != 0
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  double beta = 0.0;
  kernels::Precision precision = kernels::Precision::kF32;
  kernels::DType out_dtype = kernels::DType::kF32;
  kernels::Layout out_layout = kernels::Layout::kRowMajor;
  bool verify = false;

  std::int64_t m() const { return transpose_a ? a.cols : a.rows; }
  std::int64_t k() const { return transpose_a ? a.rows : a.cols; }
  std::int64_t n() const { return transpose_b ? b.rows : b.cols; }
  std::size_t out_bytes() const {
    return static_cast<std::size_t>(m() * n()) * kernels::dtype_size(out_dtype);
  }
};

struct TransposeJob {
  HostMatrix a;
  double scale = 1.0;
  bool verify = false;

  std::size_t out_bytes() const { return a.bytes(); }
};

// Microseconds per stage, as the reply reports them.
struct StageTimes {
  double queue_us = 0;
  double host_to_device_us = 0;
  double kernel_us = 0;
  double device_to_host_us = 0;
  double total_us = 0;
};

struct Outcome {
  std::string variant;
  std::string device;
  StageTimes times;
  double work = 0;  // flops (GEMM) or bytes moved (transpose), for GFLOP/s and GB/s
  std::optional<kernels::ErrorStats> verification;

  // work / kernel time in units of 1e9 per second (GFLOP/s or GB/s).
  double rate() const { return times.kernel_us > 0 ? work / (times.kernel_us * 1e3) : 0.0; }
};

}  // namespace matserve::server
