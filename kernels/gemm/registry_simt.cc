// Registry entries of the CUDA-core (SIMT) GEMM ladder, naive first, each rung one .cu file in
// kernels/gemm/. Every rung takes any m, n, k >= 1, both operand orders and alpha/beta; the only
// constraint is the data type: fp32 in and out (fp64 in and out where fp64 is claimed).
#include "absl/strings/str_cat.h"
#include "kernels/cuda/launch_adapter.h"
#include "kernels/gemm/simt_kernels.h"
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {
namespace {

constexpr PrecisionSet kF32 = precision_bit(Precision::kF32);
constexpr PrecisionSet kF32F64 = kF32 | precision_bit(Precision::kF64);

// Operands and C must be stored in the precision's own type (no conversion inside these kernels).
absl::Status simt_can_implement(const GemmProblem& p) {
  const DType want = p.precision == Precision::kF64 ? DType::kF64 : DType::kF32;
  if (p.in_type != want || p.out_type != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "SIMT GEMM kernels need ", std::string(dtype_name(want)), " operands and output (got ",
        std::string(dtype_name(p.in_type)), " -> ", std::string(dtype_name(p.out_type)), ")"));
  }
  return absl::OkStatus();
}

constexpr std::string_view kConstraints = "operands and C in the precision's own dtype";

template <cudaError_t (*Launch)(const GemmProblem&, cudaStream_t)>
GemmVariant simt(std::string_view name, PrecisionSet precisions, std::string_view description) {
  return GemmVariant{
      .name = name,
      .family = "simt",
      .description = description,
      .constraints = kConstraints,
      .backend = Backend::kCuda,
      .precisions = precisions,
      .can_implement = &simt_can_implement,
      .launch = &launch_cuda<GemmProblem, Launch>,
  };
}

}  // namespace

void append_simt_gemm_variants(std::vector<GemmVariant>& gemm) {
  gemm.push_back(simt<&launch_gemm_naive>(
      "naive", kF32F64, "one thread per element of C, rows across a warp (uncoalesced)"));
  gemm.push_back(simt<&launch_gemm_unrolled>(
      "unrolled", kF32, "naive with the k loop unrolled by 4 into independent partial sums"));
  gemm.push_back(simt<&launch_gemm_coalesced>(
      "coalesced", kF32, "columns across a warp: coalesced B'/C accesses, broadcast A'"));
  gemm.push_back(simt<&launch_gemm_smem_tiled_16>("smem_tiled_16", kF32F64,
                                                  "16x16 shared-memory tiles of A' and B'"));
  gemm.push_back(simt<&launch_gemm_smem_tiled_32>("smem_tiled_32", kF32F64,
                                                  "32x32 shared-memory tiles of A' and B'"));
  gemm.push_back(simt<&launch_gemm_smem_padded>(
      "smem_padded", kF32, "32x32 shared tiles padded by one word against bank conflicts"));
  gemm.push_back(simt<&launch_gemm_smem_prefetch>(
      "smem_prefetch", kF32,
      "padded 32x32 tiles + next tile prefetched into registers + unrolled loop"));
  gemm.push_back(simt<&launch_gemm_coarsened>(
      "coarsened", kF32, "thread coarsening: 4 outputs per thread, one A' load feeds four"));
  gemm.push_back(simt<&launch_gemm_reg_private>(
      "reg_private", kF32,
      "register privatization: shared A' value kept in a register, 2 outputs"));
  gemm.push_back(simt<&launch_gemm_blocktile_1d>(
      "blocktile_1d", kF32, "1D block tiling: 64x64 block tile, 8 results per thread in a column"));
  gemm.push_back(simt<&launch_gemm_blocktile_2d>(
      "blocktile_2d", kF32, "2D block tiling: 128x128 block tile, 8x8 results per thread"));
  gemm.push_back(simt<&launch_gemm_vectorized_2d>(
      "vectorized_2d", kF32F64,
      "2D block tiling with 16-byte loads and transposed shared A' (scalar edge path)"));
  gemm.push_back(simt<&launch_gemm_warptile>(
      "warptile", kF32F64, "warp tiling: block -> warp -> lane tiles, 16-byte shared reads"));
  gemm.push_back(simt<&launch_gemm_simt_pipelined>(
      "simt_pipelined", kF32F64,
      "warp tiling fed by a multi-stage cp.async ring; tile configuration chosen per shape"));
  gemm.push_back(simt<&launch_gemm_simt_pipelined_128x128>(
      "simt_pipelined_128x128", kF32,
      "simt_pipelined pinned to 128x128 tiles, k-step 8, 4 stages, 256 threads"));
  gemm.push_back(simt<&launch_gemm_simt_pipelined_128x128_k16>(
      "simt_pipelined_128x128_k16", kF32,
      "simt_pipelined pinned to 128x128 tiles, k-step 16, 4 stages, 256 threads"));
  gemm.push_back(simt<&launch_gemm_simt_pipelined_128x128_cpasync>(
      "simt_pipelined_128x128_cpasync", kF32,
      "128x128 tiles, k-step 16, 3 stages, every operand through cp.async (no register staging)"));
  gemm.push_back(simt<&launch_gemm_simt_pipelined_64x64>(
      "simt_pipelined_64x64", kF32,
      "simt_pipelined pinned to 64x64 tiles, 128 threads (4x8 results per lane)"));
  gemm.push_back(simt<&launch_gemm_simt_tuned>(
      "simt_tuned", kF32F64,
      "past the top rung: conflict-free LDS.128, double-buffered fragments, unchecked interior "
      "tiles; 128x128 or 64x64 tiles chosen per shape"));
  gemm.push_back(simt<&launch_gemm_simt_tuned_128x128>(
      "simt_tuned_128x128", kF32F64,
      "simt_tuned pinned to 128x128 tiles, k-step 8, 256 threads, 8x8 results per lane"));
  gemm.push_back(simt<&launch_gemm_simt_tuned_64x64>(
      "simt_tuned_64x64", kF32F64,
      "simt_tuned pinned to 64x64 tiles, 128 threads (8x4 fp32 / 8x4 fp64 results per lane)"));
}

}  // namespace matserve::kernels::internal
