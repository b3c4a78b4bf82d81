// Registry entries of the transpose kernels, in ladder order: naive, shared-memory tile, tuned
// 16-byte tile, then the in-place variants for resident matrices (square, rectangular).
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_adapter.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/registry_parts.h"
#include "kernels/transpose/transpose_kernels.h"

namespace matserve::kernels::internal {
namespace {

constexpr std::int64_t kMaxDim = (std::int64_t{1} << 31) - 1;

// The kernels move 2-, 4- and 8-byte elements (fp16/bf16, fp32, fp64); 1-byte fp8 is not built.
absl::Status element_size_ok(const TransposeProblem& p, std::string_view name) {
  const std::size_t e = dtype_size(p.dtype);
  if (e == 2 || e == 4 || e == 8) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("variant '", std::string(name),
                                                    "': fp64, fp32, fp16 and bf16 only (got ",
                                                    std::string(dtype_name(p.dtype)), ")"));
}

absl::Status out_of_place_can_implement(const TransposeProblem& p) {
  return element_size_ok(p, "transpose (out of place)");
}

absl::Status inplace_square_can_implement(const TransposeProblem& p) {
  if (absl::Status s = element_size_ok(p, "transpose_inplace_square"); !s.ok()) return s;
  if (p.rows != p.cols || p.ld_in != p.ld_out) {
    return absl::FailedPreconditionError(
        "variant 'transpose_inplace_square': square matrices only (rows == cols)");
  }
  return absl::OkStatus();
}

absl::Status inplace_rect_can_implement(const TransposeProblem& p) {
  if (absl::Status s = element_size_ok(p, "transpose_inplace_rect"); !s.ok()) return s;
  if (p.ld_in != p.cols || p.ld_out != p.rows) {
    return absl::FailedPreconditionError(
        "variant 'transpose_inplace_rect': packed matrices only (ld_in == cols, ld_out == rows)");
  }
  if (p.rows > kMaxDim || p.cols > kMaxDim) {
    return absl::FailedPreconditionError(
        "variant 'transpose_inplace_rect': dimensions must be below 2^31");
  }
  const std::size_t need = transpose_inplace_rect_min_scratch(p);
  if (need > kDefaultWorkspaceBytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variant 'transpose_inplace_rect': needs ", need, " bytes of scratch (one row or column ",
        "plus an index table); the per-stream workspace is ", kDefaultWorkspaceBytes,
        " bytes, so max(rows, cols) * element size must stay below about 32 MiB"));
  }
  return absl::OkStatus();
}

absl::Status inplace_rect_launch(const TransposeProblem& p, const ExecContext& ctx) {
  return cuda_status(launch_transpose_inplace_rect(p, ctx.workspace, ctx.workspace_bytes,
                                                   static_cast<cudaStream_t>(ctx.stream)),
                     "transpose_inplace_rect launch");
}

}  // namespace

void append_transpose_kernel_variants(std::vector<TransposeVariant>& transpose) {
  transpose.push_back(TransposeVariant{
      .name = "transpose_naive",
      .family = "transpose",
      .description = "one element per thread: coalesced reads, uncoalesced writes",
      .constraints = "fp64, fp32, fp16, bf16 (no fp8)",
      .backend = Backend::kCuda,
      .in_place = false,
      .can_implement = &out_of_place_can_implement,
      .launch = &launch_cuda<TransposeProblem, &launch_transpose_naive>,
  });
  transpose.push_back(TransposeVariant{
      .name = "transpose_tiled",
      .family = "transpose",
      .description = "32x32 shared-memory tile padded to 33 columns (no bank conflicts), "
                     "coalesced reads and writes, scale fused",
      .constraints = "fp64, fp32, fp16, bf16 (no fp8)",
      .backend = Backend::kCuda,
      .in_place = false,
      .can_implement = &out_of_place_can_implement,
      .launch = &launch_cuda<TransposeProblem, &launch_transpose_tiled>,
  });
  transpose.push_back(TransposeVariant{
      .name = "transpose_vectorized",
      .family = "transpose",
      .description = "16-byte loads (read-only path) and streaming stores (st.global.cs), VxV "
                     "register micro-blocks, swizzled 256-byte-row shared-memory tile, blocks "
                     "down tile columns; per-element path for unaligned rows and edges",
      .constraints = "fp64, fp32, fp16, bf16 (no fp8)",
      .backend = Backend::kCuda,
      .in_place = false,
      .can_implement = &out_of_place_can_implement,
      .launch = &launch_cuda<TransposeProblem, &launch_transpose_vectorized>,
  });
  transpose.push_back(TransposeVariant{
      .name = "transpose_inplace_square",
      .family = "transpose",
      .description = "in place: tile pairs swapped across the diagonal, 16-byte tiles, no scratch",
      .constraints = "square matrices only; fp64, fp32, fp16, bf16 (no fp8)",
      .backend = Backend::kCuda,
      .in_place = true,
      .can_implement = &inplace_square_can_implement,
      .launch = &launch_cuda<TransposeProblem, &launch_transpose_inplace_square>,
  });
  transpose.push_back(TransposeVariant{
      .name = "transpose_inplace_rect",
      .family = "transpose",
      .description =
          "in place, any shape: staged sweep through scratch panels (1.5-2 passes) when the "
          "stream workspace holds them, else the Catanzaro-Keller-Garland decomposition",
      .constraints = "packed; max(rows, cols) * element size below about 32 MiB (workspace); "
                     "fp64, fp32, fp16, bf16 (no fp8)",
      .backend = Backend::kCuda,
      .in_place = true,
      .can_implement = &inplace_rect_can_implement,
      .launch = &inplace_rect_launch,
      .preferred_workspace_bytes = &transpose_inplace_rect_recommended_scratch,
  });
}

}  // namespace matserve::kernels::internal
