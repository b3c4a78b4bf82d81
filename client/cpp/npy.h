// NumPy .npy files for the client: reads format versions 1.0, 2.0 and 3.0 of 1-D or 2-D arrays of
// '<f8' '<f4' '<f2' (and bfloat16 by the convention below), writes version 1.0. A Fortran-order
// file maps to a column-major matrix without copying the data.
// bfloat16 convention: written as '<u2' (the raw bf16 bit patterns, which NumPy loads as uint16);
// '<u2', '<V2' and '|V2' are read as bfloat16 only when the caller asks (NpyReadOptions::bf16).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/types.h"

namespace matserve::client {

using kernels::DType;
using kernels::Layout;

// A matrix as read from or written to a .npy file. A 1-D array of N elements is 1 x N.
struct NpyArray {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  DType dtype = DType::kF32;
  Layout layout = Layout::kRowMajor;  // kColMajor <=> fortran_order True
  std::string bytes;                  // rows * cols elements, little-endian, in `layout` order
};

struct NpyReadOptions {
  // Read a 2-byte unsigned ('<u2') or void ('<V2', '|V2') array as bfloat16 bit patterns.
  // Without it such files are rejected, since nothing in them says they hold bfloat16.
  bool bf16 = false;
};

// Parses the whole contents of a .npy file. Every malformed input is INVALID_ARGUMENT with a
// message naming the problem (magic, version, header, descr, shape, data length).
absl::StatusOr<NpyArray> parse_npy(std::string_view file, const NpyReadOptions& options = {});

// Reads `path` (NOT_FOUND when it cannot be opened) and parses it.
absl::StatusOr<NpyArray> read_npy(const std::string& path, const NpyReadOptions& options = {});

// Serializes `array` as a version 1.0 .npy file: descr '<f8' '<f4' '<f2' or '<u2' (bfloat16),
// fortran_order True for column-major, shape (rows, cols). INVALID_ARGUMENT when the byte length
// does not match the shape.
absl::StatusOr<std::string> serialize_npy(const NpyArray& array);

// Serializes and writes to `path`.
absl::Status write_npy(const std::string& path, const NpyArray& array);

// The descr string write_npy uses for `dtype` ("<f4", ..., "<u2" for bfloat16); empty for types
// with no .npy mapping (which serialize_npy refuses).
std::string_view npy_descr(DType dtype);

}  // namespace matserve::client
