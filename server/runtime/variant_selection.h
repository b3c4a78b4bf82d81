// Chooses the variant for a request: a named one is looked up and checked (unknown name ->
// INVALID_ARGUMENT, other backend or a failed constraint -> FAILED_PRECONDITION); "auto" (or an
// empty name) takes the autotune table's choice for the shape when there is one, else the
// backend's default order, and never a variant whose constraints refuse the problem.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/registry.h"

namespace matserve::server {

// The measured choice for a GEMM shape (from the autotune table); null when there is none.
using TunedChoice = std::function<const kernels::GemmVariant*(const kernels::GemmProblem& shape)>;

struct SelectionContext {
  kernels::Backend backend = kernels::Backend::kCpu;
  TunedChoice tuned;  // may be empty
};

// "auto" or empty.
bool is_auto(std::string_view name);

// A named variant that exists and runs on `backend`; INVALID_ARGUMENT / FAILED_PRECONDITION else.
absl::StatusOr<const kernels::GemmVariant*> lookup_gemm_variant(std::string_view name,
                                                                kernels::Backend backend);
absl::StatusOr<const kernels::TransposeVariant*> lookup_transpose_variant(std::string_view name,
                                                                          kernels::Backend backend);

// `shape` is the problem as the kernel will see it (device pointers included).
absl::StatusOr<const kernels::GemmVariant*> select_gemm_variant(std::string_view requested,
                                                                const kernels::GemmProblem& shape,
                                                                const SelectionContext& ctx);
absl::StatusOr<const kernels::TransposeVariant*> select_transpose_variant(
    std::string_view requested, const kernels::TransposeProblem& shape,
    const SelectionContext& ctx);

}  // namespace matserve::server
