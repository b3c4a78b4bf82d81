// Matrix message helpers: enum mapping, length checks, dtype and layout conversion, random data.
// Conversions go through kernels/cpu/element.h so the client rounds exactly as the server's CPU
// backend and the float64 reference do.
#include "client/cpp/matrix.h"

#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/element.h"

namespace matserve::client {

v1::DataType to_proto(DType dtype) {
  switch (dtype) {
    case DType::kF64: return v1::FP64;
    case DType::kF32: return v1::FP32;
    case DType::kF16: return v1::FP16;
    case DType::kBF16: return v1::BF16;
    case DType::kF8E4M3: return v1::FP8_E4M3;
  }
  return v1::DATA_TYPE_UNSPECIFIED;
}

v1::Layout to_proto(Layout layout) {
  return layout == Layout::kColMajor ? v1::COL_MAJOR : v1::ROW_MAJOR;
}

absl::StatusOr<DType> from_proto(v1::DataType dtype) {
  switch (dtype) {
    case v1::FP64: return DType::kF64;
    case v1::FP32: return DType::kF32;
    case v1::FP16: return DType::kF16;
    case v1::BF16: return DType::kBF16;
    case v1::FP8_E4M3: return DType::kF8E4M3;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown data type ", static_cast<int>(dtype)));
}

Layout from_proto(v1::Layout layout) {
  return layout == v1::COL_MAJOR ? Layout::kColMajor : Layout::kRowMajor;
}

absl::StatusOr<DType> parse_dtype(std::string_view name) {
  if (name == "fp64") return DType::kF64;
  if (name == "fp32") return DType::kF32;
  if (name == "fp16") return DType::kF16;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(name), "' (expected fp64, fp32, fp16 or bf16)"));
}

absl::StatusOr<Layout> parse_layout(std::string_view name) {
  if (name == "row") return Layout::kRowMajor;
  if (name == "col") return Layout::kColMajor;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown layout '", std::string(name), "' (expected row or col)"));
}

absl::StatusOr<v1::ComputeMode> parse_compute_mode(std::string_view name) {
  if (name == "default") return v1::COMPUTE_DEFAULT;
  if (name == "fp64") return v1::COMPUTE_FP64;
  if (name == "fp32") return v1::COMPUTE_FP32;
  if (name == "tf32") return v1::COMPUTE_TF32;
  if (name == "fp16") return v1::COMPUTE_FP16;
  if (name == "bf16") return v1::COMPUTE_BF16;
  if (name == "fp8") return v1::COMPUTE_FP8;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown compute mode '", std::string(name),
                   "' (expected default, fp64, fp32, tf32, fp16, bf16 or fp8)"));
}

std::string_view DTypeName(v1::DataType dtype) {
  switch (dtype) {
    case v1::FP64: return "fp64";
    case v1::FP32: return "fp32";
    case v1::FP16: return "fp16";
    case v1::BF16: return "bf16";
    case v1::FP8_E4M3: return "fp8_e4m3";
    default: return "unspecified";
  }
}

std::string_view compute_mode_name(v1::ComputeMode mode) {
  switch (mode) {
    case v1::COMPUTE_FP64: return "fp64";
    case v1::COMPUTE_FP32: return "fp32";
    case v1::COMPUTE_TF32: return "tf32";
    case v1::COMPUTE_FP16: return "fp16";
    case v1::COMPUTE_BF16: return "bf16";
    case v1::COMPUTE_FP8: return "fp8";
    default: return "default";
  }
}

std::string_view operation_name(v1::Operation op) {
  switch (op) {
    case v1::GEMM: return "gemm";
    case v1::TRANSPOSE: return "transpose";
    default: return "unspecified";
  }
}

absl::StatusOr<v1::Matrix> make_matrix(std::int64_t rows, std::int64_t cols, DType dtype,
                                       Layout layout, std::string bytes) {
  const auto esize = static_cast<std::int64_t>(kernels::dtype_size(dtype));
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError(absl::StrCat("negative shape ", rows, " x ", cols));
  }
  if (static_cast<std::int64_t>(bytes.size()) != rows * cols * esize) {
    return absl::InvalidArgumentError(absl::StrCat(
        bytes.size(), " bytes do not hold a ", rows, " x ", cols, " ",
        std::string(kernels::dtype_name(dtype)), " matrix (", rows * cols * esize, " bytes)"));
  }
  v1::Matrix m;
  m.set_rows(rows);
  m.set_cols(cols);
  m.set_dtype(to_proto(dtype));
  m.set_layout(to_proto(layout));
  m.set_data(std::move(bytes));
  return m;
}

absl::StatusOr<v1::Matrix> make_matrix(std::int64_t rows, std::int64_t cols, DType dtype,
                                       Layout layout, const void* data, std::size_t size) {
  return make_matrix(rows, cols, dtype, layout, std::string(static_cast<const char*>(data), size));
}

absl::StatusOr<v1::Matrix> matrix_from_npy(NpyArray array) {
  return make_matrix(array.rows, array.cols, array.dtype, array.layout, std::move(array.bytes));
}

absl::StatusOr<NpyArray> npy_from_matrix(v1::Matrix matrix) {
  absl::StatusOr<DType> dtype = from_proto(matrix.dtype());
  if (!dtype.ok()) return dtype.status();
  const auto esize = static_cast<std::int64_t>(kernels::dtype_size(*dtype));
  if (matrix.rows() < 0 || matrix.cols() < 0 ||
      static_cast<std::int64_t>(matrix.data().size()) != matrix.rows() * matrix.cols() * esize) {
    return absl::InvalidArgumentError(
        absl::StrCat("matrix data has ", matrix.data().size(), " bytes, shape ", matrix.rows(),
                     " x ", matrix.cols(), " needs ", matrix.rows() * matrix.cols() * esize));
  }
  NpyArray out;
  out.rows = matrix.rows();
  out.cols = matrix.cols();
  out.dtype = *dtype;
  out.layout = from_proto(matrix.layout());
  out.bytes = std::move(*matrix.mutable_data());
  return out;
}

std::string convert_elements(std::string_view bytes, DType from, DType to) {
  if (from == to) return std::string(bytes);
  const auto n = static_cast<std::int64_t>(bytes.size() / kernels::dtype_size(from));
  std::string out(static_cast<std::size_t>(n) * kernels::dtype_size(to), '\0');
  for (std::int64_t i = 0; i < n; ++i) {
    kernels::store_element(out.data(), to, i, kernels::load_element(bytes.data(), from, i));
  }
  return out;
}

std::string to_layout(std::string_view bytes, std::int64_t rows, std::int64_t cols, DType dtype,
                      Layout from, Layout to) {
  if (from == to) return std::string(bytes);
  // Stored as `from`, the data is an r x c row-major array with (r, c) = (rows, cols) for
  // row-major and (cols, rows) for column-major; the other layout is its transpose.
  const std::int64_t r = from == Layout::kRowMajor ? rows : cols;
  const std::int64_t c = from == Layout::kRowMajor ? cols : rows;
  const std::size_t es = kernels::dtype_size(dtype);
  std::string out(bytes.size(), '\0');
  for (std::int64_t i = 0; i < r; ++i) {
    for (std::int64_t j = 0; j < c; ++j) {
      std::memcpy(out.data() + (j * r + i) * es, bytes.data() + (i * c + j) * es, es);
    }
  }
  return out;
}

NpyArray random_matrix(std::int64_t rows, std::int64_t cols, DType dtype, Layout layout,
                       std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  NpyArray out;
  out.rows = rows;
  out.cols = cols;
  out.dtype = dtype;
  out.layout = Layout::kRowMajor;
  const std::int64_t n = rows * cols;
  out.bytes.assign(static_cast<std::size_t>(n) * kernels::dtype_size(dtype), '\0');
  for (std::int64_t i = 0; i < n; ++i) {
    // 53 random bits -> [0, 1) -> [-1, 1); spelled out because std::uniform_real_distribution
    // differs between standard libraries. Exact zeros are nudged so no element is 0.
    double v = static_cast<double>(engine() >> 11) * 0x1.0p-52 - 1.0;
    if (v == 0.0) v = 0.5;
    kernels::store_element(out.bytes.data(), dtype, i, v);
  }
  if (layout != Layout::kRowMajor) {
    out.bytes = to_layout(out.bytes, rows, cols, dtype, Layout::kRowMajor, layout);
    out.layout = layout;
  }
  return out;
}

}  // namespace matserve::client
