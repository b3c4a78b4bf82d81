// Variant selection: see variant_selection.h.
#include "server/runtime/variant_selection.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "server/runtime/quote.h"

namespace matserve::server {
namespace {

// "auto"'s fallback order when nothing was measured: the library first for GEMM (it is never the
// wrong choice), the fastest hand-written kernels first for transpose.
constexpr std::array<std::string_view, 2> kGemmDefaults = {"cublas", "cpu_openblas"};
constexpr std::array<std::string_view, 8> kTransposeDefaults = {
    "transpose_vectorized",     "transpose_tiled",        "cublas_geam", "transpose_naive",
    "transpose_inplace_square", "transpose_inplace_rect", "cpu_blocked", "cpu_inplace"};

// fp8 with promoted accumulation (what cuBLASLt and torch._scaled_mm do by default; both
// variants give the same sums). e4m3 data: cuBLASLt's kernel, faster than the own one from 4096^3
// up on the H100. Data quantized on the device: the own kernel, which reads the scales on the
// device, where cuBLASLt's needs them read back to the host first (a stream sync, no graph).
std::array<std::string_view, 2> fp8_defaults(const kernels::GemmProblem& shape) {
  if (shape.in_type == kernels::DType::kF8E4M3) return {"cublaslt_fp8", "wgmma_fp8"};
  return {"wgmma_fp8", "cublaslt_fp8"};
}

}  // namespace

bool is_auto(std::string_view name) {
  return name.empty() || name == "auto";
}

namespace {

template <typename Variant>
absl::Status wrong_backend(const Variant& v, kernels::Backend have) {
  return absl::FailedPreconditionError(
      absl::StrCat("variant '", std::string(v.name), "' runs on the ",
                   std::string(kernels::backend_name(v.backend)), " backend; this server runs the ",
                   std::string(kernels::backend_name(have)), " backend (see ListKernels)"));
}

}  // namespace

absl::StatusOr<const kernels::GemmVariant*> lookup_gemm_variant(std::string_view requested,
                                                                kernels::Backend backend) {
  const kernels::GemmVariant* v = kernels::find_gemm_variant(requested);
  if (v == nullptr) {
    if (kernels::find_transpose_variant(requested) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("variant: ", quote(requested), " is a transpose kernel, not a GEMM kernel"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "variant: unknown GEMM kernel ", quote(requested), " (see ListKernels, or 'auto')"));
  }
  if (v->backend != backend) return wrong_backend(*v, backend);
  return v;
}

absl::StatusOr<const kernels::GemmVariant*> select_gemm_variant(std::string_view requested,
                                                                const kernels::GemmProblem& shape,
                                                                const SelectionContext& ctx) {
  if (!is_auto(requested)) {
    absl::StatusOr<const kernels::GemmVariant*> v = lookup_gemm_variant(requested, ctx.backend);
    if (!v.ok()) return v;
    if (absl::Status s = kernels::check_gemm_variant(**v, shape); !s.ok()) return s;
    return v;
  }
  const auto usable = [&](std::string_view name) -> const kernels::GemmVariant* {
    const kernels::GemmVariant* v = kernels::find_gemm_variant(name);
    if (v == nullptr || v->backend != ctx.backend) return nullptr;
    return kernels::check_gemm_variant(*v, shape).ok() ? v : nullptr;
  };
  if (ctx.tuned) {
    const kernels::GemmVariant* v = ctx.tuned(shape);
    if (v != nullptr && v->backend == ctx.backend && kernels::check_gemm_variant(*v, shape).ok()) {
      return v;
    }
  }
  for (std::string_view name : kGemmDefaults) {
    if (const kernels::GemmVariant* v = usable(name)) return v;
  }
  if (shape.precision == kernels::Precision::kF8) {
    for (std::string_view name : fp8_defaults(shape)) {
      if (const kernels::GemmVariant* v = usable(name)) return v;
    }
  }
  std::string why;  // the first refusal of a kernel that computes this precision at all
  for (const kernels::GemmVariant& v : kernels::gemm_variants()) {
    if (const kernels::GemmVariant* ok = usable(v.name)) return ok;
    if (why.empty() && v.backend == ctx.backend && v.supports(shape.precision)) {
      why = absl::StrCat(" (", std::string(kernels::check_gemm_variant(v, shape).message()), ")");
    }
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "variant: no ", std::string(kernels::backend_name(ctx.backend)), " GEMM kernel computes ",
      std::string(kernels::precision_name(shape.precision)), " for this problem", why));
}

absl::StatusOr<const kernels::TransposeVariant*> lookup_transpose_variant(
    std::string_view requested, kernels::Backend backend) {
  const kernels::TransposeVariant* v = kernels::find_transpose_variant(requested);
  if (v == nullptr) {
    if (kernels::find_gemm_variant(requested) != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("variant: ", quote(requested), " is a GEMM kernel, not a transpose kernel"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "variant: unknown transpose kernel ", quote(requested), " (see ListKernels, or 'auto')"));
  }
  if (v->backend != backend) return wrong_backend(*v, backend);
  return v;
}

absl::StatusOr<const kernels::TransposeVariant*> select_transpose_variant(
    std::string_view requested, const kernels::TransposeProblem& shape,
    const SelectionContext& ctx) {
  if (!is_auto(requested)) {
    absl::StatusOr<const kernels::TransposeVariant*> v =
        lookup_transpose_variant(requested, ctx.backend);
    if (!v.ok()) return v;
    if (absl::Status s = kernels::check_transpose_variant(**v, shape); !s.ok()) return s;
    return v;
  }
  const auto usable = [&](std::string_view name) -> const kernels::TransposeVariant* {
    const kernels::TransposeVariant* v = kernels::find_transpose_variant(name);
    if (v == nullptr || v->backend != ctx.backend) return nullptr;
    return kernels::check_transpose_variant(*v, shape).ok() ? v : nullptr;
  };
  for (std::string_view name : kTransposeDefaults) {
    if (const kernels::TransposeVariant* v = usable(name)) return v;
  }
  for (const kernels::TransposeVariant& v : kernels::transpose_variants()) {
    if (const kernels::TransposeVariant* ok = usable(v.name)) return ok;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "variant: no ", std::string(kernels::backend_name(ctx.backend)), " transpose kernel handles ",
      std::string(kernels::dtype_name(shape.dtype)), " data"));
}

}  // namespace matserve::server
