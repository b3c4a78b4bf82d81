// Registry entries of the tensor-core GEMM variants, in ladder order: WMMA, mma.sync, wgmma
// (sm_90 only), then the cuBLASLt library variants. Each entry states what it refuses.
#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/cublaslt/cublaslt_fp8.h"
#include "kernels/cublaslt/cublaslt_gemm.h"
#include "kernels/cublaslt/fp8_operands.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/launch_adapter.h"
#include "kernels/gemm/tensor_core_kernels.h"
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {
namespace {

constexpr PrecisionSet kHalfPrecisions =
    precision_bit(Precision::kF16) | precision_bit(Precision::kBF16);

// Hand-written kernels take fp16/bf16 operands as given (fp32 data is converted by the caller)
// and write fp32 or the operand type.
absl::Status sixteen_bit_operands(std::string_view name, const GemmProblem& p) {
  const DType want = p.precision == Precision::kF16 ? DType::kF16 : DType::kBF16;
  if (p.in_type != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variant '", std::string(name), "': operands must be ", std::string(dtype_name(want)),
        " (fp32 data is converted on the device before the call)"));
  }
  if (p.out_type != DType::kF32 && p.out_type != want) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", std::string(name), "': writes fp32 or the operand type"));
  }
  if ((p.m + 127) / 128 > 65535) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", std::string(name), "': m must be below 8388608"));
  }
  return absl::OkStatus();
}

absl::Status wmma_can_implement(const GemmProblem& p) {
  return sixteen_bit_operands("wmma", p);
}
absl::Status mma_sync_can_implement(const GemmProblem& p) {
  if (p.batch.count > 65535) {
    return absl::FailedPreconditionError(
        "variant 'mma_sync': at most 65535 products per batch (one grid layer each)");
  }
  return sixteen_bit_operands("mma_sync", p);
}

// wgmma and setmaxnreg exist on sm_90 only (sm_90a code does not run on later chips). Asked of
// the first device the process sees, once.
bool is_sm90() {
  static const bool sm90 = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return sm90;
}

absl::Status wgmma_can_implement(const GemmProblem& p) {
  if (p.precision != Precision::kTF32) {
    if (absl::Status s = sixteen_bit_operands("wgmma", p); !s.ok()) return s;
  }
  if (!is_sm90())
    return absl::FailedPreconditionError("variant 'wgmma': needs an sm_90 GPU (H100/H200)");
  if (const char* why = wgmma_gemm_unsupported(p); why != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("variant 'wgmma': ", why));
  }
  return absl::OkStatus();
}

absl::Status wgmma_tma_store_can_implement(const GemmProblem& p) {
  if (p.precision == Precision::kTF32) {
    return absl::FailedPreconditionError("variant 'wgmma_tma_store': fp16/bf16 only");
  }
  if (absl::Status s = wgmma_can_implement(p); !s.ok()) return s;
  if (const char* why = wgmma_tma_store_unsupported(p); why != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("variant 'wgmma_tma_store': ", why));
  }
  return absl::OkStatus();
}

// The f64 mma.sync shapes with m16 exist from sm_90 on.
absl::Status dmma_can_implement(const GemmProblem& p) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) == cudaSuccess) {
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  }
  if (major < 9)
    return absl::FailedPreconditionError("variant 'dmma': needs an sm_90 GPU or later");
  if (const char* why = dmma_gemm_unsupported(p); why != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("variant 'dmma': ", why));
  }
  return absl::OkStatus();
}

absl::Status wgmma_tma_store_launch(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = wgmma_tma_store_can_implement(p); !s.ok()) return s;
  return launch_cuda<GemmProblem, &launch_wgmma_gemm_tma_store>(p, ctx);
}

absl::Status wgmma_launch(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = wgmma_can_implement(p); !s.ok()) return s;
  return launch_cuda<GemmProblem, &launch_wgmma_gemm>(p, ctx);
}

// The wgmma fp8 kernel: refuses what no fp8 variant takes, outputs other than bf16/fp16/fp32,
// and non-Hopper GPUs; every operand order and type is made K-major e4m3 first.
absl::Status wgmma_fp8_refusal(const char* name, const GemmProblem& p) {
  if (absl::Status s = fp8_operands_refusal(name, p); !s.ok()) return s;
  if (p.out_type != DType::kBF16 && p.out_type != DType::kF16 && p.out_type != DType::kF32) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", name, "': writes bf16, fp16 or fp32"));
  }
  if (p.m > (1ll << 31) || p.n > (1ll << 31) || p.k > (1ll << 31)) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", name, "': dimensions below 2^31"));
  }
  if (!is_sm90()) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", name, "': needs an sm_90 GPU (H100/H200)"));
  }
  return absl::OkStatus();
}

absl::Status wgmma_fp8_can_implement(const GemmProblem& p) {
  return wgmma_fp8_refusal("wgmma_fp8", p);
}
absl::Status wgmma_fp8_fast_can_implement(const GemmProblem& p) {
  return wgmma_fp8_refusal("wgmma_fp8_fast", p);
}

// Quantize or repack what is not K-major e4m3, then the kernel, which reads the dequant scales on
// the device: nothing waits on the host, so every call may be captured.
absl::Status wgmma_fp8_run(const GemmProblem& p, const ExecContext& ctx, bool promote) {
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  return for_each_product(p, [&](const GemmProblem& one) -> absl::Status {
    absl::StatusOr<Fp8Operands> ops = Fp8Operands::prepare(one, Fp8Layout{}, stream);
    if (!ops.ok()) return ops.status();
    return cuda_status(
        launch_wgmma_fp8_gemm(ops->problem(), ops->a_scale(), ops->b_scale(), promote, stream),
        "wgmma fp8 launch");
  });
}

absl::Status wgmma_fp8_launch(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = wgmma_fp8_can_implement(p); !s.ok()) return s;
  return wgmma_fp8_run(p, ctx, /*promote=*/true);
}
absl::Status wgmma_fp8_fast_launch(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = wgmma_fp8_fast_can_implement(p); !s.ok()) return s;
  return wgmma_fp8_run(p, ctx, /*promote=*/false);
}

}  // namespace

void append_tensor_core_gemm_variants(std::vector<GemmVariant>& gemm) {
  gemm.push_back(GemmVariant{
      .name = "wmma",
      .family = "tensor_core",
      .description =
          "WMMA 16x16x16: 64x64x32 block tiles staged in shared memory (bounds-checked), "
          "4 warps of 2x2 fragments, fp32 accumulate",
      .constraints = "fp16/bf16 operands; fp32 or operand-type output",
      .backend = Backend::kCuda,
      .precisions = kHalfPrecisions,
      .can_implement = &wmma_can_implement,
      .launch = &launch_cuda<GemmProblem, &launch_wmma_gemm>,
  });
  gemm.push_back(GemmVariant{
      .name = "mma_sync",
      .family = "tensor_core",
      .description = "mma.sync m16n8k16: 128x128x32 tiles, 4-stage cp.async pipeline (zero-filled "
                     "edges), ldmatrix fragments, 8 warps of 64x32",
      .constraints = "fp16/bf16 operands; fp32 or operand-type output; 16-byte aligned rows take "
                     "the cp.async path, others a slower predicated path; batches up to 65535",
      .backend = Backend::kCuda,
      .precisions = kHalfPrecisions,
      .can_implement = &mma_sync_can_implement,
      .launch = &launch_cuda<GemmProblem, &launch_mma_sync_gemm>,
      .batched = true,
  });
  gemm.push_back(GemmVariant{
      .name = "wgmma",
      .family = "tensor_core",
      .description = "Hopper wgmma m64n256k16 from 128B-swizzled shared memory: TMA loads, "
                     "producer + 2 consumer warpgroups, 4-stage mbarrier pipeline, persistent "
                     "128x256 tiles; tf32 for fp32 data",
      .constraints = "sm_90 only; TMA needs 16-byte aligned operands and rows (leading "
                     "dimensions divisible by 8 for fp16/bf16, 4 for fp32); tf32 only with "
                     "A k-contiguous and B k-contiguous (a_trans=false, b_trans=true)",
      .backend = Backend::kCuda,
      .precisions = kHalfPrecisions | precision_bit(Precision::kTF32),
      .can_implement = &wgmma_can_implement,
      .launch = &wgmma_launch,
  });
  gemm.push_back(GemmVariant{
      .name = "wgmma_tma_store",
      .family = "tensor_core",
      .description = "wgmma as above, epilogue staged in shared memory and written by TMA bulk "
                     "stores that overlap the next tile's mainloop (3 stages at 128x256)",
      .constraints = "as wgmma, plus: fp16/bf16 output, beta == 0, 16-byte aligned C with ldc "
                     "divisible by 8",
      .backend = Backend::kCuda,
      .precisions = kHalfPrecisions,
      .can_implement = &wgmma_tma_store_can_implement,
      .launch = &wgmma_tma_store_launch,
  });
  gemm.push_back(GemmVariant{
      .name = "wgmma_fp8",
      .family = "tensor_core",
      .description = "Hopper wgmma m64n128k32 e4m3: the wgmma pipeline with 128-element K rows, "
                     "6 stages, 128x128 tiles; each stage's partial sum (128 of K) promoted into "
                     "full fp32; per-tensor dequant scales read on the device (fp32/fp16/bf16 "
                     "data quantized with amax/448 scales, e4m3 data repacked K-major when stored "
                     "otherwise)",
      .constraints = "sm_90 only; bf16, fp16 or fp32 output; batches stacked (strided), not "
                     "pointer arrays",
      .backend = Backend::kCuda,
      .precisions = precision_bit(Precision::kF8),
      .can_implement = &wgmma_fp8_can_implement,
      .launch = &wgmma_fp8_launch,
      .batched = true,
  });
  gemm.push_back(GemmVariant{
      .name = "wgmma_fp8_fast",
      .family = "tensor_core",
      .description = "wgmma_fp8 with fast accumulation: m64n256k32 on 128x256 tiles, the "
                     "tensor cores' own fp32 sum (about 14 bits kept) over all of K, as "
                     "cuBLASLt's FAST_ACCUM and torch._scaled_mm(use_fast_accum=True)",
      .constraints = "as wgmma_fp8",
      .backend = Backend::kCuda,
      .precisions = precision_bit(Precision::kF8),
      .can_implement = &wgmma_fp8_fast_can_implement,
      .launch = &wgmma_fp8_fast_launch,
      .batched = true,
  });
  gemm.push_back(GemmVariant{
      .name = "dmma",
      .family = "tensor_core",
      .description = "fp64 tensor cores: mma.sync m16n8k4 .f64, 128x128x16 tiles, 4-stage "
                     "cp.async pipeline (zero-filled edges), swizzled shared tiles, 8 warps of "
                     "64x32",
      .constraints = "fp64 operands and output; sm_90 or later; 16-byte aligned rows take the "
                     "cp.async path, others a slower predicated path; batches up to 65535",
      .backend = Backend::kCuda,
      .precisions = precision_bit(Precision::kF64),
      .can_implement = &dmma_can_implement,
      .launch = &launch_cuda<GemmProblem, &launch_dmma_gemm>,
      .batched = true,
  });
  gemm.push_back(GemmVariant{
      .name = "cublaslt",
      .family = "library",
      .description = "cuBLASLt cublasLtMatmul (fp16, bf16, tf32; fp32 accumulate) with the "
                     "heuristic's choice cached per shape/layout/type/alignment/batch; batches "
                     "strided or as device pointer arrays (the layouts' batch mode)",
      .constraints = "dimensions and batch count below 2^31; fp16/bf16 operands converted "
                     "before the call",
      .backend = Backend::kCuda,
      .precisions = kHalfPrecisions | precision_bit(Precision::kTF32),
      .can_implement = &cublaslt_gemm_can_implement,
      .launch = &cublaslt_gemm,
      .batched = true,
  });
  gemm.push_back(GemmVariant{
      .name = "cublaslt_fp8",
      .family = "library",
      .description = "cuBLASLt fp8 e4m3 (per-tensor dequant scales, fp32 accumulate): fp32/fp16/"
                     "bf16 data quantized on the device with amax/448 scales into K-major scratch; "
                     "e4m3 data taken with scale 1, repacked K-major when stored otherwise; a "
                     "batch of stacked products runs one product after another, each with its "
                     "own scales",
      .constraints = "bf16 or fp32 output; batches stacked (strided), not pointer arrays",
      .backend = Backend::kCuda,
      .precisions = precision_bit(Precision::kF8),
      .can_implement = &cublaslt_fp8_can_implement,
      .launch = &cublaslt_fp8_gemm,
      // Quantizing fp32/fp16/bf16 data may read the scales back to the host (when cuBLASLt
      // refuses them as device pointers); e4m3 data needs no scale: its launches are captured.
      .capturable = false,
      .capturable_for = &cublaslt_fp8_capturable,
      .batched = true,
  });
  gemm.push_back(GemmVariant{
      .name = "cublaslt_fp8_fast",
      .family = "library",
      .description = "cublaslt_fp8 with fast accumulation (CUBLASLT_MATMUL_DESC_FAST_ACCUM): the "
                     "tensor cores' fp32 sum is never promoted; faster, less accurate for large k",
      .constraints = "as cublaslt_fp8",
      .backend = Backend::kCuda,
      .precisions = precision_bit(Precision::kF8),
      .can_implement = &cublaslt_fp8_fast_can_implement,
      .launch = &cublaslt_fp8_fast_gemm,
      .capturable = false,
      .capturable_for = &cublaslt_fp8_capturable,
      .batched = true,
  });
}

}  // namespace matserve::kernels::internal
