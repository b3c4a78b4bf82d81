// Builds the kernel library's canonical problems from proto messages (the same reduction the
// server uses) and runs the float64 reference on them. C0 is brought to row-major first; a
// column-major reply is compared against the transposed reference.
#include "client/cli/verify.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cpp/matrix.h"
#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"

namespace matserve::client::cli {
namespace {

namespace v1 = ::matserve::v1;

absl::Status check_bytes(const v1::Matrix& m, kernels::DType t, std::string_view what) {
  const auto want = static_cast<std::size_t>(m.rows() * m.cols()) * kernels::dtype_size(t);
  if (m.rows() < 0 || m.cols() < 0 || m.data().size() != want) {
    return absl::DataLossError(absl::StrCat(std::string(what), " has ", m.data().size(),
                                            " bytes, shape ", m.rows(), " x ", m.cols(), " needs ",
                                            want));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<kernels::ErrorStats> verify_multiply(const v1::MultiplyRequest& request,
                                                    const v1::Matrix& c) {
  absl::StatusOr<kernels::DType> in_type = from_proto(request.a().dtype());
  if (!in_type.ok()) return in_type.status();
  absl::StatusOr<kernels::DType> b_type = from_proto(request.b().dtype());
  if (!b_type.ok()) return b_type.status();
  absl::StatusOr<kernels::DType> out_type = from_proto(c.dtype());
  if (!out_type.ok()) return absl::DataLossError("the reply's C has no dtype");
  if (*b_type != *in_type) return absl::InvalidArgumentError("A and B have different dtypes");
  if (absl::Status s = check_bytes(request.a(), *in_type, "A"); !s.ok()) return s;
  if (absl::Status s = check_bytes(request.b(), *in_type, "B"); !s.ok()) return s;
  if (absl::Status s = check_bytes(c, *out_type, "the reply's C"); !s.ok()) return s;

  kernels::GemmRequestDesc desc;
  desc.a = {request.a().rows(), request.a().cols(), from_proto(request.a().layout()),
            request.transpose_a(), request.a().data().data()};
  desc.b = {request.b().rows(), request.b().cols(), from_proto(request.b().layout()),
            request.transpose_b(), request.b().data().data()};
  desc.in_type = *in_type;
  desc.out_type = *out_type;
  desc.alpha = request.has_alpha() ? request.alpha() : 1.0;
  desc.beta = request.has_beta() ? request.beta() : 0.0;
  desc.c_layout = kernels::Layout::kRowMajor;
  kernels::GemmProblem p = kernels::canonicalize_gemm(desc);
  const std::int64_t k_b = request.transpose_b() ? request.b().cols() : request.b().rows();
  if (k_b != p.k) {
    return absl::InvalidArgumentError(
        absl::StrCat("inner dimensions differ: op(A) has ", p.k, " columns, op(B) ", k_b, " rows"));
  }
  if (c.rows() != p.m || c.cols() != p.n) {
    return absl::DataLossError(absl::StrCat("the reply's C is ", c.rows(), " x ", c.cols(),
                                            ", expected ", p.m, " x ", p.n));
  }

  // C0 in row-major storage and the output dtype, as the canonical problem reads it.
  std::string c0;
  if (desc.beta != 0.0 && request.has_c()) {
    const v1::Matrix& in_c = request.c();
    absl::StatusOr<kernels::DType> c_type = from_proto(in_c.dtype());
    if (!c_type.ok()) return c_type.status();
    if (absl::Status s = check_bytes(in_c, *c_type, "C"); !s.ok()) return s;
    if (in_c.rows() != p.m || in_c.cols() != p.n) {
      return absl::InvalidArgumentError(
          absl::StrCat("C is ", in_c.rows(), " x ", in_c.cols(), ", expected ", p.m, " x ", p.n));
    }
    c0 = convert_elements(to_layout(in_c.data(), p.m, p.n, *c_type, from_proto(in_c.layout()),
                                    kernels::Layout::kRowMajor),
                          *c_type, *out_type);
  }
  const std::vector<double> ref = kernels::reference_gemm(p, c0.empty() ? nullptr : c0.data());
  if (c.layout() == v1::ROW_MAJOR) {
    return kernels::compare_with_reference(c.data().data(), *out_type, p.m, p.n, p.n, ref);
  }
  std::vector<double> ref_t(ref.size());
  for (std::int64_t i = 0; i < p.m; ++i) {
    for (std::int64_t j = 0; j < p.n; ++j) ref_t[j * p.m + i] = ref[i * p.n + j];
  }
  return kernels::compare_with_reference(c.data().data(), *out_type, p.n, p.m, p.m, ref_t);
}

absl::StatusOr<kernels::ErrorStats> verify_transpose(const v1::TransposeRequest& request,
                                                     const v1::Matrix& b) {
  const v1::Matrix& a = request.a();
  absl::StatusOr<kernels::DType> dtype = from_proto(a.dtype());
  if (!dtype.ok()) return dtype.status();
  if (absl::Status s = check_bytes(a, *dtype, "A"); !s.ok()) return s;
  if (b.dtype() != a.dtype() || b.layout() != a.layout() || b.rows() != a.cols() ||
      b.cols() != a.rows()) {
    return absl::DataLossError(
        absl::StrCat("the reply's B is ", b.rows(), " x ", b.cols(), " ",
                     std::string(DTypeName(b.dtype())), ", expected ", a.cols(), " x ", a.rows(),
                     " ", std::string(DTypeName(a.dtype())), " in the input's layout"));
  }
  if (absl::Status s = check_bytes(b, *dtype, "the reply's B"); !s.ok()) return s;
  // Storage-level comparison: both layouts reduce to "row-major p.rows x p.cols in, row-major
  // p.cols x p.rows out".
  const kernels::TransposeProblem p = kernels::canonicalize_transpose(
      a.rows(), a.cols(), from_proto(a.layout()), *dtype, a.data().data(), nullptr,
      request.has_scale() ? request.scale() : 1.0);
  const std::vector<double> ref = kernels::reference_transpose(p);
  return kernels::compare_with_reference(b.data().data(), *dtype, p.cols, p.rows, p.rows, ref);
}

}  // namespace matserve::client::cli
