// Assembles the variant list once (CPU entries, then CUDA entries in CUDA builds) and answers
// look-ups and the checks every variant shares.
#include "kernels/registry.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/precision.h"
#include "kernels/registry_parts.h"

namespace matserve::kernels {
namespace {

struct Registry {
  std::vector<GemmVariant> gemm;
  std::vector<TransposeVariant> transpose;
};

const Registry& registry() {
  static const Registry* const r = [] {
    auto* built = new Registry;  // NOLINT: immutable, lives for the process (never destroyed)
    internal::append_cpu_variants(built->gemm, built->transpose);
#ifdef MATSERVE_HAVE_CUDA
    internal::append_cuda_variants(built->gemm, built->transpose);
#endif
    return built;
  }();
  return *r;
}

}  // namespace

const std::vector<GemmVariant>& gemm_variants() {
  return registry().gemm;
}
const std::vector<TransposeVariant>& transpose_variants() {
  return registry().transpose;
}

const GemmVariant* find_gemm_variant(std::string_view name) {
  for (const GemmVariant& v : gemm_variants()) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

const TransposeVariant* find_transpose_variant(std::string_view name) {
  for (const TransposeVariant& v : transpose_variants()) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

absl::Status check_gemm_variant(const GemmVariant& v, const GemmProblem& p) {
  if (!v.supports(p.precision)) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", std::string(v.name), "' does not compute ",
                     std::string(precision_name(p.precision)),
                     " (it supports: ", precision_list(v.precisions), ")"));
  }
  if (p.batch.count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch: ", p.batch.count, " products (must be >= 1)"));
  }
  if (p.batch.count > 1 && !v.batched) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variant '", std::string(v.name),
        "' computes one product per launch (batched variants: ", batched_variant_list(), ")"));
  }
  if (v.can_implement != nullptr) return v.can_implement(p);
  return absl::OkStatus();
}

std::string batched_variant_list() {
  std::vector<std::string> names;
  for (const GemmVariant& v : gemm_variants()) {
    if (v.batched) names.emplace_back(v.name);
  }
  return names.empty() ? std::string("none in this build") : absl::StrJoin(names, ", ");
}

absl::Status check_transpose_variant(const TransposeVariant& v, const TransposeProblem& p) {
  if (v.in_place != (p.in == p.out)) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", std::string(v.name), "' is ",
                     v.in_place ? "in-place (resident matrices only)" : "out-of-place"));
  }
  if (v.can_implement != nullptr) return v.can_implement(p);
  return absl::OkStatus();
}

std::string precision_list(PrecisionSet s) {
  std::vector<std::string> names;
  for (Precision p : kEveryPrecision) {
    if ((s & precision_bit(p)) != 0) names.emplace_back(precision_name(p));
  }
  return absl::StrJoin(names, ",");
}

}  // namespace matserve::kernels
