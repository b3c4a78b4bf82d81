// cuBLASLt call core: see cublaslt_plan.h. The heuristic query costs about a microsecond and its
// answer depends only on the key below, so the first answer per key is kept for the process.
#include "kernels/cublaslt/cublaslt_plan.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

// RAII for the three cuBLASLt descriptor kinds.
struct MatmulDescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* d) const { cublasLtMatrixLayoutDestroy(d); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* d) const { cublasLtMatmulPreferenceDestroy(d); }
};
using MatmulDesc = std::unique_ptr<cublasLtMatmulDescOpaque_t, MatmulDescDeleter>;
using MatrixLayout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Preference = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter>;

// Largest power of two (up to 256) dividing the address: the heuristic's alignment input.
std::uint32_t alignment(const void* ptr) {
  const auto v = reinterpret_cast<std::uintptr_t>(ptr);
  std::uint32_t a = 256;
  while (a > 1 && (v % a) != 0) a /= 2;
  return a;
}

using PlanKey = std::array<std::int64_t, 18>;

struct PlanCache {
  std::mutex mu;
  std::map<PlanKey, cublasLtMatmulAlgo_t> plans;
};

PlanCache& cache() {
  static PlanCache* const c = new PlanCache;  // NOLINT: process lifetime, never destroyed
  return *c;
}

absl::Status lt(cublasStatus_t s, const char* what) {
  return cublas_status(s, what);
}

}  // namespace

cudaDataType_t lt_data_type(DType t) {
  switch (t) {
    case DType::kF64: return CUDA_R_64F;
    case DType::kF32: return CUDA_R_32F;
    case DType::kF16: return CUDA_R_16F;
    case DType::kBF16: return CUDA_R_16BF;
    default: break;
  }
  return CUDA_R_8F_E4M3;
}

std::size_t lt_plan_cache_size() {
  std::lock_guard<std::mutex> lock(cache().mu);
  return cache().plans.size();
}

absl::Status lt_matmul(const LtCall& call, const ExecContext& ctx) {
  const GemmProblem& p = *call.p;
  auto handle = static_cast<cublasLtHandle_t>(ctx.cublaslt);
  if (handle == nullptr) return absl::InternalError("cublaslt: no cuBLASLt handle in context");
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  const void* a = call.a != nullptr ? call.a : p.a;
  const void* b = call.b != nullptr ? call.b : p.b;
  const auto n = static_cast<std::uint64_t>(p.n);
  const auto m = static_cast<std::uint64_t>(p.m);
  const auto k = static_cast<std::uint64_t>(p.k);

  // Column-major view: D^T (n x m) = op1(B) (n x k) * op2(A) (k x m).
  cublasLtMatmulDesc_t raw_desc = nullptr;
  if (absl::Status s = lt(cublasLtMatmulDescCreate(&raw_desc, call.compute, CUDA_R_32F),
                          "cublasLtMatmulDescCreate");
      !s.ok()) {
    return s;
  }
  MatmulDesc desc(raw_desc);
  const cublasOperation_t op1 = p.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op2 = p.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1);
  cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2);
  if (call.b_scale != nullptr) {  // the first Lt operand is our B
    cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &call.b_scale,
                                   sizeof call.b_scale);
  }
  if (call.a_scale != nullptr) {
    cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &call.a_scale,
                                   sizeof call.a_scale);
  }

  cublasLtMatrixLayout_t l1 = nullptr, l2 = nullptr, lc = nullptr;
  absl::Status s =
      lt(cublasLtMatrixLayoutCreate(&l1, call.b_type, p.b_trans ? k : n, p.b_trans ? n : k, p.ldb),
         "cublasLtMatrixLayoutCreate");
  MatrixLayout lay1(l1);
  if (s.ok()) {
    s = lt(
        cublasLtMatrixLayoutCreate(&l2, call.a_type, p.a_trans ? m : k, p.a_trans ? k : m, p.lda),
        "cublasLtMatrixLayoutCreate");
  }
  MatrixLayout lay2(l2);
  if (s.ok()) {
    s = lt(cublasLtMatrixLayoutCreate(&lc, call.c_type, n, m, p.ldc), "cublasLtMatrixLayoutCreate");
  }
  MatrixLayout layc(lc);
  if (!s.ok()) return s;

  int device = 0;
  cudaGetDevice(&device);
  const PlanKey key = {device,
                       p.m,
                       p.n,
                       p.k,
                       p.lda,
                       p.ldb,
                       p.ldc,
                       p.a_trans,
                       p.b_trans,
                       call.a_type,
                       call.b_type,
                       call.c_type,
                       call.compute,
                       alignment(a),
                       alignment(b),
                       alignment(p.c),
                       static_cast<std::int64_t>(ctx.workspace_bytes),
                       call.a_scale != nullptr};
  cublasLtMatmulAlgo_t algo{};
  bool found = false;
  {
    std::lock_guard<std::mutex> lock(cache().mu);
    auto it = cache().plans.find(key);
    if (it != cache().plans.end()) {
      algo = it->second;
      found = true;
    }
  }
  if (!found) {
    cublasLtMatmulPreference_t raw_pref = nullptr;
    if (s = lt(cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate");
        !s.ok()) {
      return s;
    }
    Preference pref(raw_pref);
    const std::uint64_t ws = ctx.workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof ws);
    const std::uint32_t align_b = alignment(b), align_a = alignment(a), align_c = alignment(p.c);
    cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                         &align_b, sizeof align_b);
    cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                         &align_a, sizeof align_a);
    cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                         &align_c, sizeof align_c);
    cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                         &align_c, sizeof align_c);
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    if (s = lt(
            cublasLtMatmulAlgoGetHeuristic(handle, desc.get(), lay1.get(), lay2.get(), layc.get(),
                                           layc.get(), pref.get(), 1, &result, &returned),
            "cublasLtMatmulAlgoGetHeuristic");
        !s.ok()) {
      return s;
    }
    if (returned == 0) {
      return absl::FailedPreconditionError(
          "cublaslt: the heuristic found no algorithm for this shape/layout/type");
    }
    algo = result.algo;
    std::lock_guard<std::mutex> lock(cache().mu);
    cache().plans.emplace(key, algo);
  }

  const float alpha = static_cast<float>(p.alpha);
  const float beta = static_cast<float>(p.beta);
  return lt(cublasLtMatmul(handle, desc.get(), &alpha, b, lay1.get(), a, lay2.get(), &beta, p.c,
                           layc.get(), p.c, layc.get(), &algo, ctx.workspace, ctx.workspace_bytes,
                           static_cast<cudaStream_t>(ctx.stream)),
            "cublasLtMatmul");
}

}  // namespace matserve::kernels
