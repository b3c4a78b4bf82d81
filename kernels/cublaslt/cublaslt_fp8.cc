// cuBLASLt fp8 (e4m3) GEMM variants, promoted and fast accumulation: e4m3 operands with
// per-tensor dequant scales, fp32 accumulate, bf16 or fp32 output, every operand order. The
// operands are made K-major e4m3 first where they are not (fp8_operands.h: quantized or
// repacked on the device), with k and B's rows padded to 16 as cuBLASLt's fp8 kernels want. A
// batch of stacked products runs one product after another.
#include "kernels/cublaslt/cublaslt_fp8.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/cublaslt/cublaslt_plan.h"
#include "kernels/cublaslt/fp8_operands.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

// What both cuBLASLt fp8 variants refuse, named as `variant`.
absl::Status fp8_refusal(const char* variant, const GemmProblem& p) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (p.m > kMax || p.n > kMax || round16(p.k) > kMax || p.ldc > kMax) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", variant, "': dimensions must fit in 32 bits"));
  }
  if (p.out_type != DType::kBF16 && p.out_type != DType::kF32) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", variant, "': writes bf16 or fp32"));
  }
  return fp8_operands_refusal(variant, p);
}

// Set once cuBLASLt has refused device-side A/B scale pointers for this process: from then on the
// scales are read back (one stream sync) and folded into alpha.
std::atomic<bool> g_fold_scales{false};

// One product: operands K-major (k padded to 16, B's rows to a multiple of 16, as cuBLASLt's fp8
// kernels want), D padded in scratch when C is not 16-byte aligned in rows, scales as device
// pointers or, once cuBLASLt has refused those, read back and folded into alpha.
absl::Status cublaslt_fp8_one(const GemmProblem& p, const ExecContext& ctx, bool fast_accum) {
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  const std::size_t osize = dtype_size(p.out_type);
  const std::int64_t n_pad = round16(p.n);
  const bool pad_c =
      n_pad != p.n || (p.ldc * static_cast<std::int64_t>(osize)) % 16 != 0 || !aligned16(p.c);
  const std::int64_t ldd = pad_c ? n_pad : p.ldc;
  Fp8Layout layout;
  layout.b_rows = n_pad;
  layout.pad_k16 = true;
  layout.extra_bytes = pad_c ? static_cast<std::size_t>(p.m * ldd) * osize : 0;
  absl::StatusOr<Fp8Operands> ops = Fp8Operands::prepare(p, layout, stream);
  if (!ops.ok()) return ops.status();
  GemmProblem q = ops->problem();
  const bool quantize = ops->quantized();
  LtCall call;
  call.a_type = CUDA_R_8F_E4M3;
  call.b_type = CUDA_R_8F_E4M3;
  call.c_type = lt_data_type(p.out_type);
  call.compute = CUBLAS_COMPUTE_32F;
  call.fast_accum = fast_accum;
  call.a_scale = ops->a_scale();
  call.b_scale = ops->b_scale();
  void* d = ops->extra();
  if (pad_c) {
    q.c = d;
    q.ldc = ldd;
    if (p.beta != 0.0) {
      if (absl::Status s =
              cuda_status(cudaMemcpy2DAsync(d, ldd * osize, p.c, p.ldc * osize, p.n * osize, p.m,
                                            cudaMemcpyDeviceToDevice, stream),
                          "cudaMemcpy2DAsync");
          !s.ok()) {
        return s;
      }
    }
  }
  call.p = &q;
  absl::Status st;
  if (quantize && !g_fold_scales.load()) {
    st = lt_matmul(call, ctx);
    if (st.code() == absl::StatusCode::kFailedPrecondition) g_fold_scales.store(true);
  }
  if (quantize && g_fold_scales.load()) {
    float host_scales[2] = {1.0f, 1.0f};
    const float* scales = ops->a_scale();  // b's follows it
    if (st = cuda_status(cudaMemcpyAsync(host_scales, scales, sizeof host_scales,
                                         cudaMemcpyDeviceToHost, stream),
                         "cudaMemcpyAsync");
        !st.ok()) {
      return st;
    }
    if (st = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !st.ok()) {
      return st;
    }
    q.alpha = p.alpha * static_cast<double>(host_scales[0]) * host_scales[1];
    call.a_scale = nullptr;
    call.b_scale = nullptr;
    st = lt_matmul(call, ctx);
  }
  if (!quantize) {
    st = lt_matmul(call, ctx);
  }
  if (!st.ok()) return st;
  if (pad_c) {
    return cuda_status(cudaMemcpy2DAsync(p.c, p.ldc * osize, d, ldd * osize, p.n * osize, p.m,
                                         cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpy2DAsync");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status cublaslt_fp8_can_implement(const GemmProblem& p) {
  return fp8_refusal("cublaslt_fp8", p);
}

absl::Status cublaslt_fp8_fast_can_implement(const GemmProblem& p) {
  return fp8_refusal("cublaslt_fp8_fast", p);
}

bool cublaslt_fp8_capturable(const GemmProblem& p) {
  return p.in_type == DType::kF8E4M3;
}

absl::Status cublaslt_fp8_gemm(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = cublaslt_fp8_can_implement(p); !s.ok()) return s;
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  return for_each_product(
      p, [&ctx](const GemmProblem& one) { return cublaslt_fp8_one(one, ctx, false); });
}

absl::Status cublaslt_fp8_fast_gemm(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = cublaslt_fp8_fast_can_implement(p); !s.ok()) return s;
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  return for_each_product(
      p, [&ctx](const GemmProblem& one) { return cublaslt_fp8_one(one, ctx, true); });
}

}  // namespace matserve::kernels
