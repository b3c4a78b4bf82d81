// Building and unpacking matserve.v1.Matrix messages on the client: enum conversions between the
// proto and the kernel library's plain types, byte-length checks, .npy <-> Matrix, host-side dtype
// conversion and seeded random matrices (uniform in [-1, 1), never all zero).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cpp/npy.h"
#include "kernels/types.h"
#include "matserve/v1/matrix_service.pb.h"

namespace matserve::client {

namespace v1 = ::matserve::v1;

// Enum conversions. The proto's DATA_TYPE_UNSPECIFIED has no kernel equivalent (INVALID_ARGUMENT).
v1::DataType to_proto(DType dtype);
v1::Layout to_proto(Layout layout);
absl::StatusOr<DType> from_proto(v1::DataType dtype);
Layout from_proto(v1::Layout layout);

// Names as users type them: "fp64" "fp32" "fp16" "bf16"; "row" "col"; "default" "fp32" "tf32" ...
absl::StatusOr<DType> parse_dtype(std::string_view name);
absl::StatusOr<Layout> parse_layout(std::string_view name);
absl::StatusOr<v1::ComputeMode> parse_compute_mode(std::string_view name);
std::string_view DTypeName(v1::DataType dtype);  // "fp32", ...; "unspecified" for 0
std::string_view compute_mode_name(v1::ComputeMode mode);
std::string_view operation_name(v1::Operation op);  // "gemm", "transpose"

// A Matrix message over `bytes` (moved in). INVALID_ARGUMENT when the length is not
// rows * cols * element size or a dimension is negative.
absl::StatusOr<v1::Matrix> make_matrix(std::int64_t rows, std::int64_t cols, DType dtype,
                                       Layout layout, std::string bytes);

// Same, copying from raw memory.
absl::StatusOr<v1::Matrix> make_matrix(std::int64_t rows, std::int64_t cols, DType dtype,
                                       Layout layout, const void* data, std::size_t size);

// .npy arrays and Matrix messages, both ways (moving the bytes).
absl::StatusOr<v1::Matrix> matrix_from_npy(NpyArray array);
absl::StatusOr<NpyArray> npy_from_matrix(v1::Matrix matrix);

// The same elements in another dtype (rounded to nearest even). A no-op when the dtypes agree.
std::string convert_elements(std::string_view bytes, DType from, DType to);

// The same matrix stored in the other layout (same rows, cols, dtype).
std::string to_layout(std::string_view bytes, std::int64_t rows, std::int64_t cols, DType dtype,
                      Layout from, Layout to);

// rows x cols uniform random values in [-1, 1), from a 64-bit Mersenne Twister seeded with `seed`,
// generated in row-major element order and stored in `layout`; the same seed gives the same
// matrix on every machine.
NpyArray random_matrix(std::int64_t rows, std::int64_t cols, DType dtype, Layout layout,
                       std::uint64_t seed);

}  // namespace matserve::client
