// Random and file operands of matserve-bench's requests (see operands.h).
#include "client/bench/operands.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client/bench/workload.h"

namespace matserve::client::bench {

DType data_type_of(const std::string& precision) {
  if (precision == "fp64") return DType::kF64;
  if (precision == "fp16") return DType::kF16;
  if (precision == "bf16") return DType::kBF16;
  return DType::kF32;  // fp32, tf32, fp8 (fp32 data quantized on the device)
}

v1::Matrix random_operand(std::int64_t rows, std::int64_t cols, std::int64_t count, DType dtype,
                          std::uint64_t seed) {
  auto matrix = matrix_from_npy(random_matrix(count * rows, cols, dtype, Layout::kRowMajor, seed));
  if (!matrix.ok()) return v1::Matrix{};
  matrix->set_rows(rows);
  if (count > 1) matrix->set_batch(count);
  return *std::move(matrix);
}

std::vector<v1::Matrix> unstack(const v1::Matrix& stack) {
  const std::int64_t count = std::max<std::int64_t>(stack.batch(), 1);
  const std::size_t one = stack.data().size() / static_cast<std::size_t>(count);
  std::vector<v1::Matrix> out;
  for (std::int64_t i = 0; i < count; ++i) {
    v1::Matrix& m = out.emplace_back();
    m.set_rows(stack.rows());
    m.set_cols(stack.cols());
    m.set_dtype(stack.dtype());
    m.set_layout(stack.layout());
    m.set_data(stack.data().substr(static_cast<std::size_t>(i) * one, one));
  }
  return out;
}

namespace {

// Reads one operand file; errors start with the option that named it.
absl::StatusOr<v1::Matrix> read_operand(const std::string& flag, const std::string& path,
                                        bool bf16) {
  absl::StatusOr<NpyArray> array = read_npy(path, NpyReadOptions{.bf16 = bf16});
  if (!array.ok()) {
    return absl::Status(array.status().code(),
                        absl::StrCat(flag, " ", path, ": ", array.status().message()));
  }
  return matrix_from_npy(*std::move(array));
}

std::string dims(const v1::Matrix& m) {
  return absl::StrCat(m.rows(), "x", m.cols());
}

}  // namespace

absl::StatusOr<FileOperands> load_file_operands(const BenchOptions& o) {
  const bool multiply = o.workload.has(Op::kMultiply);
  if (o.a_npy.empty()) return absl::InvalidArgumentError("--b-npy needs --a-npy");
  if (multiply && o.b_npy.empty()) {
    return absl::InvalidArgumentError("--a-npy: a multiply workload needs B too (--b-npy)");
  }
  const bool bf16 = std::find(o.compute.begin(), o.compute.end(), "bf16") != o.compute.end();
  FileOperands files;
  absl::StatusOr<v1::Matrix> a = read_operand("--a-npy", o.a_npy, bf16);
  if (!a.ok()) return a.status();
  files.a = *std::move(a);
  files.shape = Shape{files.a.rows(), files.a.rows(), files.a.cols()};
  if (!o.b_npy.empty()) {
    absl::StatusOr<v1::Matrix> b = read_operand("--b-npy", o.b_npy, bf16);
    if (!b.ok()) return b.status();
    files.b = *std::move(b);
    files.has_b = true;
    if (files.b.rows() != files.a.cols()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--b-npy: B (", o.b_npy, ") is ", dims(files.b), " but A (", o.a_npy,
                       ") is ", dims(files.a), ": B's rows (", files.b.rows(),
                       ") must equal A's columns (", files.a.cols(), ")"));
    }
    if (files.b.dtype() != files.a.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--b-npy: B (", o.b_npy, ") holds ", std::string(DTypeName(files.b.dtype())),
                       " but A (", o.a_npy, ") holds ", std::string(DTypeName(files.a.dtype())),
                       ": both operands need one data type"));
    }
    files.shape.n = files.b.cols();
  }
  files.data_type = std::string(DTypeName(files.a.dtype()));
  for (const std::string& compute : o.compute) {
    if (!o.compute_given) break;  // main then sends the file's data type
    if (to_proto(data_type_of(compute)) != files.a.dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--compute ", compute, ": --a-npy holds ", files.data_type, " data, which ",
                       files.data_type == "fp32" ? "feeds fp32, tf32 or fp8"
                                                 : absl::StrCat("feeds only ", files.data_type)));
    }
  }
  return files;
}

}  // namespace matserve::client::bench
