// The operands a run sends: seeded random matrices of the run's shape and precision (stacked for
// a batch), or A and B read once from .npy files (--a-npy, --b-npy), whose shape and dtype then
// fix the run's shape and data type; mismatches are refused with a message naming both files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/bench/options.h"
#include "client/cpp/matrix.h"

namespace matserve::client::bench {

// The data type sent for a --compute name: fp32 for fp32, tf32 and fp8 (quantized on the device).
DType data_type_of(const std::string& precision);

// `count` random rows x cols matrices, row-major, stacked batch-major (the bytes of one
// count*rows x cols matrix); Matrix.batch says how many when more than one.
v1::Matrix random_operand(std::int64_t rows, std::int64_t cols, std::int64_t count, DType dtype,
                          std::uint64_t seed);

// The matrices of a stack, one Matrix each.
std::vector<v1::Matrix> unstack(const v1::Matrix& stack);

// Operands from files: A (always) and B (when the workload multiplies), and the shape they make
// (m x k from A; n from B, or m for a transpose-only workload).
struct FileOperands {
  v1::Matrix a, b;
  bool has_b = false;
  Shape shape;
  std::string data_type;  // "fp64", "fp32", "fp16" or "bf16"
};

// Reads options.a_npy / options.b_npy. INVALID_ARGUMENT (or NOT_FOUND for a missing file) naming
// the option: unreadable or malformed file, B missing for a multiply, A's columns not B's rows,
// different dtypes, a --compute mode the file's data cannot feed.
absl::StatusOr<FileOperands> load_file_operands(const BenchOptions& options);

}  // namespace matserve::client::bench
