// The single list of kernel variants: name, family, precisions, constraints, technique, launcher.
// The server's ListKernels, the CLI's help, the benchmarks and the dashboard labels all read it.
// Adding a kernel: kernels/README.md (one .cu file, its launcher, one registry entry in its
// family's gemm/registry_*.cc or transpose/registry_transpose.cc; the tests pick it up).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"
#include "kernels/types.h"

namespace matserve::kernels {

enum class Backend { kCuda, kCpu };
enum class Operation { kGemm, kTranspose };

constexpr std::string_view backend_name(Backend b) {
  return b == Backend::kCuda ? "cuda" : "cpu";
}

// What a launch may use besides the problem: the stream and the per-stream library handles. The
// runtime owns all of these (one set per stream); a kernel never creates or caches them.
struct ExecContext {
  void* stream = nullptr;     // cudaStream_t; null on the CPU backend
  void* cublas = nullptr;     // cublasHandle_t bound to `stream`
  void* cublaslt = nullptr;   // cublasLtHandle_t
  void* workspace = nullptr;  // device scratch for library calls, per stream
  std::size_t workspace_bytes = 0;
};

struct GemmVariant {
  std::string_view name;
  std::string_view family;       // "simt", "tensor_core", "library", "cpu"
  std::string_view description;  // one line naming the technique
  std::string_view constraints;  // human summary of what can_implement refuses; empty when none
  Backend backend = Backend::kCuda;
  PrecisionSet precisions = 0;
  // OK when this variant can compute `p` (its precision is already known to be in `precisions`);
  // otherwise FailedPrecondition naming the constraint. Null means "every problem".
  absl::Status (*can_implement)(const GemmProblem& p) = nullptr;
  absl::Status (*launch)(const GemmProblem& p, const ExecContext& ctx) = nullptr;
  // False when launch() must talk to the host mid-call (a read-back, a synchronization): it then
  // cannot be captured as a CUDA graph and replayed (kernels/cuda/launch_graphs.h).
  bool capturable = true;
  // With capturable false: the problems whose launch never talks to the host, and so may be
  // captured after all (null: none).
  bool (*capturable_for)(const GemmProblem& p) = nullptr;
  // Takes a batched problem (batch.count > 1, strided or pointer arrays): in one launch, or, where
  // its description says so, one product after another.
  bool batched = false;

  bool supports(Precision p) const { return (precisions & precision_bit(p)) != 0; }
  // Whether launch(p) may be captured as a CUDA graph.
  bool can_capture(const GemmProblem& p) const {
    return capturable || (capturable_for != nullptr && capturable_for(p));
  }
};

struct TransposeVariant {
  std::string_view name;
  std::string_view family;
  std::string_view description;
  std::string_view constraints;
  Backend backend = Backend::kCuda;
  bool in_place = false;  // needs in == out (resident matrices); out-of-place otherwise
  absl::Status (*can_implement)(const TransposeProblem& p) = nullptr;
  absl::Status (*launch)(const TransposeProblem& p, const ExecContext& ctx) = nullptr;
  // Scratch the variant runs best with, which may exceed the stream's workspace (null: the
  // workspace is all it wants). A backend that can spare the memory lends it as ctx.workspace.
  std::size_t (*preferred_workspace_bytes)(const TransposeProblem& p) = nullptr;
};

// Every variant built into this binary, in ladder order (CUDA ones only in CUDA builds).
const std::vector<GemmVariant>& gemm_variants();
const std::vector<TransposeVariant>& transpose_variants();

// Null when no variant has that name.
const GemmVariant* find_gemm_variant(std::string_view name);
const TransposeVariant* find_transpose_variant(std::string_view name);

// can_implement plus the checks every variant shares: a GEMM variant's precision and whether it
// takes a batch; a transpose variant's in-place or out-of-place form. The output dtype is no
// variant's concern: the service checks it once, with check_output_dtype (precision.h).
absl::Status check_gemm_variant(const GemmVariant& v, const GemmProblem& p);
absl::Status check_transpose_variant(const TransposeVariant& v, const TransposeProblem& p);

// The names of the variants that take batched problems, comma-separated.
std::string batched_variant_list();

// Comma-separated precision names, e.g. "fp32,tf32".
std::string precision_list(PrecisionSet s);

}  // namespace matserve::kernels
