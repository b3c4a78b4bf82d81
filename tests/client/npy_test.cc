// .npy reading and writing: round trips of every dtype and layout, version 2.0/3.0 headers, 1-D
// arrays, files as NumPy writes them, and malformed files each rejected with a message naming the
// problem.
#include "client/cpp/npy.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/element.h"
#include "tests/support/test_temp_dir.h"

namespace matserve::client {
namespace {

using ::testing::HasSubstr;

// A .npy file with the given version and header text (padded like NumPy: the data starts at a
// multiple of 64 bytes) followed by `data`.
std::string make_npy(int major, std::string header, const std::string& data) {
  const std::size_t pre = major == 1 ? 10 : 12;
  const std::size_t total = pre + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const std::size_t n = header.size();
  out.push_back(static_cast<char>(n & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  if (major != 1) {
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    out.push_back(static_cast<char>((n >> 24) & 0xff));
  }
  return out + header + data;
}

std::string floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

NpyArray Sample(DType dtype, Layout layout, std::int64_t rows, std::int64_t cols) {
  NpyArray a;
  a.rows = rows;
  a.cols = cols;
  a.dtype = dtype;
  a.layout = layout;
  a.bytes.resize(static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype));
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    kernels::store_element(a.bytes.data(), dtype, i, 0.25 * static_cast<double>(i) - 3.0);
  }
  return a;
}

absl::Status parse_error(const std::string& file, NpyReadOptions options = {}) {
  return parse_npy(file, options).status();
}

class NpyRoundTrip : public ::testing::TestWithParam<std::tuple<DType, Layout>> {};

TEST_P(NpyRoundTrip, SerializeThenParseGivesTheSameMatrix) {
  const auto [dtype, layout] = GetParam();
  const NpyArray in = Sample(dtype, layout, 3, 5);
  absl::StatusOr<std::string> file = serialize_npy(in);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->size() % 64, in.bytes.size() % 64);  // data starts 64-byte aligned
  NpyReadOptions options;
  options.bf16 = dtype == DType::kBF16;
  absl::StatusOr<NpyArray> out = parse_npy(*file, options);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->rows, 3);
  EXPECT_EQ(out->cols, 5);
  EXPECT_EQ(out->dtype, dtype);
  EXPECT_EQ(out->layout, layout);
  EXPECT_EQ(out->bytes, in.bytes);
}

INSTANTIATE_TEST_SUITE_P(
    EveryDtypeAndLayout, NpyRoundTrip,
    ::testing::Combine(::testing::Values(DType::kF64, DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(Layout::kRowMajor, Layout::kColMajor)),
    [](const ::testing::TestParamInfo<NpyRoundTrip::ParamType>& info) {
      return absl::StrCat(std::string(kernels::dtype_name(std::get<0>(info.param))),
                          std::get<1>(info.param) == Layout::kRowMajor ? "_row" : "_col");
    });

TEST(Npy, WritesTheHeaderNumPyWrites) {
  absl::StatusOr<std::string> file = serialize_npy(Sample(DType::kF32, Layout::kRowMajor, 2, 3));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_THAT(*file, HasSubstr("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
  EXPECT_EQ((*file)[10 + 117], '\n');  // header padded to 128 bytes in all
}

TEST(Npy, WritesBf16AsUint16AndFortranOrderForColumnMajor) {
  absl::StatusOr<std::string> file = serialize_npy(Sample(DType::kBF16, Layout::kColMajor, 2, 2));
  ASSERT_TRUE(file.ok());
  EXPECT_THAT(*file, HasSubstr("'descr': '<u2', 'fortran_order': True"));
}

TEST(Npy, RejectsWritingBytesThatDoNotMatchTheShape) {
  NpyArray a = Sample(DType::kF32, Layout::kRowMajor, 2, 2);
  a.bytes.pop_back();
  EXPECT_THAT(serialize_npy(a).status().message(), HasSubstr("do not match shape (2, 2)"));
}

TEST(Npy, ReadsFortranOrderAsColumnMajorWithoutReordering) {
  const std::string data = floats({1, 2, 3, 4, 5, 6});
  absl::StatusOr<NpyArray> a =
      parse_npy(make_npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", data));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->layout, Layout::kColMajor);
  EXPECT_EQ(a->rows, 2);
  EXPECT_EQ(a->cols, 3);
  EXPECT_EQ(a->bytes, data);
}

TEST(Npy, ReadsVersion2And3Headers) {
  for (int major : {2, 3}) {
    absl::StatusOr<NpyArray> a =
        parse_npy(make_npy(major, "{'descr': '<f8', 'fortran_order': False, 'shape': (1, 2), }",
                           std::string(16, '\0')));
    ASSERT_TRUE(a.ok()) << "version " << major << ": " << a.status();
    EXPECT_EQ(a->dtype, DType::kF64);
    EXPECT_EQ(a->cols, 2);
  }
}

TEST(Npy, ReadsOneDimensionalArraysAsOneRow) {
  absl::StatusOr<NpyArray> a = parse_npy(make_npy(
      1, "{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }", std::string(8, 'x')));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rows, 1);
  EXPECT_EQ(a->cols, 4);
  EXPECT_EQ(a->dtype, DType::kF16);
  EXPECT_EQ(a->layout, Layout::kRowMajor);
}

TEST(Npy, AcceptsKeysInAnyOrderDoubleQuotesAndNativeOrder) {
  absl::StatusOr<NpyArray> a = parse_npy(
      make_npy(1, "{\"shape\": (1,1), \"fortran_order\": False, \"descr\": \"=f4\"}", floats({7})));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->dtype, DType::kF32);
}

TEST(Npy, ReadsEmptyMatrices) {
  absl::StatusOr<NpyArray> a =
      parse_npy(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", ""));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->rows, 0);
  EXPECT_TRUE(a->bytes.empty());
}

TEST(Npy, ReadsBf16OnlyWhenAsked) {
  for (const char* descr : {"<u2", "<V2", "|V2"}) {
    const std::string file = make_npy(
        1, absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (1, 1), }"),
        std::string("\x80\x3f", 2));
    EXPECT_THAT(parse_error(file).message(), HasSubstr("read it as bf16")) << descr;
    NpyReadOptions options;
    options.bf16 = true;
    absl::StatusOr<NpyArray> a = parse_npy(file, options);
    ASSERT_TRUE(a.ok()) << descr << ": " << a.status();
    EXPECT_EQ(a->dtype, DType::kBF16);
    EXPECT_EQ(kernels::load_element(a->bytes.data(), DType::kBF16, 0), 1.0);
  }
}

TEST(Npy, AskingForBf16StillReadsFloatFiles) {
  NpyReadOptions options;
  options.bf16 = true;
  absl::StatusOr<NpyArray> a = parse_npy(
      make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), }", floats({1})),
      options);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->dtype, DType::kF32);
}

TEST(Npy, FileRoundTripAndMissingFile) {
  const matserve::testing::TestTempDir temp;
  const std::string path = temp.path("roundtrip.npy");
  const NpyArray in = Sample(DType::kF64, Layout::kColMajor, 4, 2);
  ASSERT_TRUE(write_npy(path, in).ok());
  absl::StatusOr<NpyArray> out = read_npy(path);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->bytes, in.bytes);
  EXPECT_EQ(out->layout, Layout::kColMajor);
  std::remove(path.c_str());
  absl::Status missing = read_npy(path).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr(path));
}

// --- Malformed files: each rejected as INVALID_ARGUMENT with a message naming the problem. ----

const char* kGoodHeader = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";

void expect_rejected(const std::string& file, const std::string& needle) {
  const absl::Status s = parse_error(file);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr(needle));
}

TEST(NpyMalformed, BadMagic) {
  std::string file = make_npy(1, kGoodHeader, floats({1, 2, 3, 4}));
  file[1] = 'n';
  expect_rejected(file, "bad magic");
  expect_rejected("", "bad magic");
}

TEST(NpyMalformed, UnsupportedVersion) {
  std::string file = make_npy(1, kGoodHeader, floats({1, 2, 3, 4}));
  file[6] = 4;
  expect_rejected(file, "unsupported format version 4.0");
}

TEST(NpyMalformed, TruncatedPreamble) {
  expect_rejected(std::string("\x93NUMPY\x02\x00\x10", 9), "truncated header");
  expect_rejected(std::string("\x93NUMPY\x01", 7), "truncated header");
}

TEST(NpyMalformed, TruncatedHeader) {
  const std::string file = make_npy(1, kGoodHeader, "");
  expect_rejected(file.substr(0, 40), "header length 118 runs past the end of the file");
}

TEST(NpyMalformed, TruncatedData) {
  const std::string file = make_npy(1, kGoodHeader, floats({1, 2, 3, 4}));
  expect_rejected(file.substr(0, file.size() - 3),
                  "truncated data: shape (2, 2) of '<f4' needs 16 bytes, the file has 13");
}

TEST(NpyMalformed, TrailingBytes) {
  expect_rejected(make_npy(1, kGoodHeader, floats({1, 2, 3, 4, 5})),
                  "4 unexpected bytes after the data");
}

TEST(NpyMalformed, UnknownDescr) {
  expect_rejected(make_npy(1, "{'descr': '<i4', 'fortran_order': False, 'shape': (1, 1), }",
                           std::string(4, '\0')),
                  "unsupported dtype '<i4'");
  expect_rejected(make_npy(1, "{'descr': '<c8', 'fortran_order': False, 'shape': (1, 1), }",
                           std::string(8, '\0')),
                  "unsupported dtype '<c8'");
}

TEST(NpyMalformed, BigEndian) {
  expect_rejected(make_npy(1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }",
                           floats({1, 2, 3, 4})),
                  "big-endian dtype '>f4' is not supported");
}

TEST(NpyMalformed, ThreeDimensionalShape) {
  expect_rejected(make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }",
                           std::string(96, '\0')),
                  "3-D shape (2, 3, 4) is not supported");
}

TEST(NpyMalformed, ZeroDimensionalShape) {
  expect_rejected(
      make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", floats({1})),
      "0-D array");
}

TEST(NpyMalformed, ObjectDtype) {
  expect_rejected(make_npy(1, "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }",
                           std::string(16, '\0')),
                  "object dtype '|O'");
}

TEST(NpyMalformed, StructuredDtype) {
  expect_rejected(make_npy(1, "{'descr': [('x', '<f4')], 'fortran_order': False, 'shape': (1,), }",
                           floats({1})),
                  "structured dtype");
}

TEST(NpyMalformed, HeaderLengthLiesShort) {
  // The length field says 20 bytes: the dict is cut off in the middle of a string.
  std::string file = make_npy(1, kGoodHeader, floats({1, 2, 3, 4}));
  file[8] = 20;
  file[9] = 0;
  expect_rejected(file, "malformed header");
}

TEST(NpyMalformed, HeaderLengthLiesLong) {
  // The length field claims 16 more bytes than the header has: they are taken from the data.
  std::string file = make_npy(1, kGoodHeader, floats({1, 2, 3, 4}));
  file[8] = static_cast<char>(static_cast<unsigned char>(file[8]) + 16);
  expect_rejected(file, "malformed header");
  // ...and past the end of the file.
  file[9] = 0x10;
  expect_rejected(file, "runs past the end of the file");
}

TEST(NpyMalformed, MissingAndUnknownKeys) {
  expect_rejected(make_npy(1, "{'descr': '<f4', 'shape': (1, 1), }", floats({1})),
                  "no 'fortran_order'");
  expect_rejected(
      make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1), 'x': 1}", floats({1})),
      "unexpected header key 'x'");
  expect_rejected(make_npy(1,
                           "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, "
                           "'shape': (1, 1)}",
                           floats({1})),
                  "duplicate header key 'descr'");
}

TEST(NpyMalformed, BadValues) {
  expect_rejected(
      make_npy(1, "{'descr': '<f4', 'fortran_order': 0, 'shape': (1, 1), }", floats({1})),
      "expected a string, True, False or a tuple");
  expect_rejected(
      make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-1, 1), }", floats({1})),
      "negative dimension");
  expect_rejected(
      make_npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': '1x1', }", floats({1})),
      "'shape' is not a tuple");
  expect_rejected(make_npy(1,
                           "{'descr': '<f4', 'fortran_order': False, "
                           "'shape': (4611686018427387904, 4), }",
                           floats({1})),
                  "is too large");
}

}  // namespace
}  // namespace matserve::client
