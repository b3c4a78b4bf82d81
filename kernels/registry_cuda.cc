// Registry entries of the CUDA backend, in ladder order: the families' own lists (SIMT ladder,
// tensor cores, transpose kernels), then the cuBLAS library variants they are measured against.
#include "kernels/cublas/cublas_geam.h"
#include "kernels/cublas/cublas_gemm.h"
#include "kernels/registry_parts.h"

namespace matserve::kernels::internal {

void append_cuda_variants(std::vector<GemmVariant>& gemm,
                          std::vector<TransposeVariant>& transpose) {
  append_simt_gemm_variants(gemm);
  append_tensor_core_gemm_variants(gemm);
  append_transpose_kernel_variants(transpose);
  gemm.push_back(GemmVariant{
      .name = "cublas",
      .family = "library",
      .description = "cuBLAS cublasGemmEx (batches: cublasGemm[Strided]BatchedEx): fp64 (DMMA), "
                     "fp32 pedantic (no tensor cores), tf32, fp16/bf16 tensor cores with fp32 "
                     "accumulation",
      .constraints = "dimensions and leading dimensions below 2^31",
      .backend = Backend::kCuda,
      .precisions = kEveryPrecisionButF8,
      .can_implement = &cublas_gemm_can_implement,
      .launch = &cublas_gemm,
      .batched = true,
  });
  transpose.push_back(TransposeVariant{
      .name = "cublas_geam",
      .family = "library",
      .description =
          "cuBLAS geam with op(A) = T and beta = 0: the library's out-of-place transpose",
      .constraints = "fp32 and fp64 only; dimensions below 2^31",
      .backend = Backend::kCuda,
      .in_place = false,
      .can_implement = &cublas_geam_can_implement,
      .launch = &cublas_geam_transpose,
  });
}

}  // namespace matserve::kernels::internal
