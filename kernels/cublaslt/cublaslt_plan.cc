// cuBLASLt call core: see cublaslt_plan.h. A plan (the matmul and layout descriptors and the
// heuristic's algorithm) depends only on the key below, so it is built once and kept: a request
// then pays for one cache look-up and the cublasLtMatmul call, not for creating and destroying four
// descriptors and querying the heuristic (about a microsecond). Plans are kept per cuBLASLt handle
// (one per stream slot, used by one request at a time), so no plan is used by two threads at
// once, in a cache bounded to kMaxPlans, least recently used first out.
// A batched problem sets each layout's batch count and either its stride (a strided batch) or
// the pointer-array mode, in which the three pointers given to cublasLtMatmul are device arrays
// of each product's matrix.
#include "kernels/cublaslt/cublaslt_plan.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/status/statusor.h"
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

// The alignments (bytes) the heuristic may assume of A, B and C.
struct Alignments {
  std::uint32_t a = 1;
  std::uint32_t b = 1;
  std::uint32_t c = 1;
};

// The pointers' own alignments; for a pointer-array batch (`arrays`: a, b, c are the device
// arrays) what the caller checked of every entry (16 bytes), or else the element size.
Alignments operand_alignments(const GemmProblem& p, bool arrays, const void* a, const void* b,
                              const void* c) {
  if (!arrays) return {alignment(a), alignment(b), alignment(c)};
  const auto entry = [&](DType t) {
    return p.batch.arrays_aligned16 ? 16u : static_cast<std::uint32_t>(dtype_size(t));
  };
  return {entry(p.in_type), entry(p.in_type), entry(p.out_type)};
}

using PlanKey = std::array<std::int64_t, 25>;

// What one call needs besides its pointers and scalars. For fp8 the matmul descriptor also carries
// the call's scale pointers, so fp8 calls build their own and use only the layouts and algorithm.
struct Plan {
  MatmulDesc desc;
  MatrixLayout first, second, out;  // op1(B), op2(A), C and D (column-major view)
  cublasLtMatmulAlgo_t algo{};
};

// Most plans kept: a service sees a bounded set of shapes in practice; a client sweeping shapes
// only evicts the least recently used.
constexpr std::size_t kMaxPlans = 2048;

class PlanCache {
 public:
  std::shared_ptr<const Plan> find(const PlanKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);  // most recently used first
    return it->second->second;
  }
  void add(const PlanKey& key, std::shared_ptr<const Plan> plan) {
    std::lock_guard<std::mutex> lock(mu_);
    if (index_.count(key) != 0) return;
    lru_.emplace_front(key, std::move(plan));
    index_.emplace(key, lru_.begin());
    while (lru_.size() > kMaxPlans) {
      index_.erase(lru_.back().first);
      lru_.pop_back();  // a plan in use lives on in its caller's shared_ptr
    }
  }
  std::size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return lru_.size();
  }

 private:
  using Entry = std::pair<PlanKey, std::shared_ptr<const Plan>>;
  std::mutex mu_;
  std::list<Entry> lru_;
  std::map<PlanKey, std::list<Entry>::iterator> index_;
};

PlanCache& cache() {
  static PlanCache* const c = new PlanCache;  // NOLINT: process lifetime, never destroyed
  return *c;
}

absl::Status lt(cublasStatus_t s, const char* what) {
  return cublas_status(s, what);
}

// The matmul descriptor of a call: compute type, transposes, and for fp8 its scale pointers.
absl::StatusOr<MatmulDesc> make_desc(const LtCall& call) {
  const GemmProblem& p = *call.p;
  cublasLtMatmulDesc_t raw = nullptr;
  if (absl::Status s =
          lt(cublasLtMatmulDescCreate(&raw, call.compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
      !s.ok()) {
    return s;
  }
  MatmulDesc desc(raw);
  const cublasOperation_t op1 = p.b_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op2 = p.a_trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSA, &op1, sizeof op1);
  cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_TRANSB, &op2, sizeof op2);
  if (call.fast_accum) {
    const std::int8_t on = 1;
    cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_FAST_ACCUM, &on, sizeof on);
  }
  if (call.b_scale != nullptr) {  // the first Lt operand is our B
    cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &call.b_scale,
                                   sizeof call.b_scale);
  }
  if (call.a_scale != nullptr) {
    cublasLtMatmulDescSetAttribute(desc.get(), CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &call.a_scale,
                                   sizeof call.a_scale);
  }
  return desc;
}

// A layout; in a batch (count > 1) also its count and its stride (in elements) or pointer-array
// mode.
absl::StatusOr<MatrixLayout> make_layout(cudaDataType_t type, std::uint64_t rows,
                                         std::uint64_t cols, std::int64_t ld,
                                         const GemmBatch& batch, std::int64_t stride) {
  cublasLtMatrixLayout_t raw = nullptr;
  if (absl::Status s =
          lt(cublasLtMatrixLayoutCreate(&raw, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
      !s.ok()) {
    return s;
  }
  MatrixLayout layout(raw);
  if (batch.count > 1) {
    const auto count = static_cast<std::int32_t>(batch.count);
    const std::uint32_t mode =
        batch.has_arrays() ? CUBLASLT_BATCH_MODE_POINTER_ARRAY : CUBLASLT_BATCH_MODE_STRIDED;
    if (absl::Status s = lt(cublasLtMatrixLayoutSetAttribute(
                                raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
                            "cublasLtMatrixLayoutSetAttribute(batch count)");
        !s.ok()) {
      return s;
    }
    if (absl::Status s = lt(cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_MODE,
                                                             &mode, sizeof mode),
                            "cublasLtMatrixLayoutSetAttribute(batch mode)");
        !s.ok()) {
      return s;
    }
    if (!batch.has_arrays()) {
      if (absl::Status s =
              lt(cublasLtMatrixLayoutSetAttribute(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                  &stride, sizeof stride),
                 "cublasLtMatrixLayoutSetAttribute(batch stride)");
          !s.ok()) {
        return s;
      }
    }
  }
  return layout;
}

// Builds a plan: descriptors, then the heuristic's first choice for them.
absl::StatusOr<std::shared_ptr<const Plan>> make_plan(const LtCall& call, const Alignments& align,
                                                      const ExecContext& ctx) {
  const GemmProblem& p = *call.p;
  const auto n = static_cast<std::uint64_t>(p.n);
  const auto m = static_cast<std::uint64_t>(p.m);
  const auto k = static_cast<std::uint64_t>(p.k);
  auto plan = std::make_shared<Plan>();
  // Column-major view: D^T (n x m) = op1(B) (n x k) * op2(A) (k x m).
  absl::StatusOr<MatmulDesc> desc = make_desc(call);
  if (!desc.ok()) return desc.status();
  plan->desc = *std::move(desc);
  absl::StatusOr<MatrixLayout> first = make_layout(
      call.b_type, p.b_trans ? k : n, p.b_trans ? n : k, p.ldb, p.batch, p.batch.stride_b);
  if (!first.ok()) return first.status();
  plan->first = *std::move(first);
  absl::StatusOr<MatrixLayout> second = make_layout(
      call.a_type, p.a_trans ? m : k, p.a_trans ? k : m, p.lda, p.batch, p.batch.stride_a);
  if (!second.ok()) return second.status();
  plan->second = *std::move(second);
  absl::StatusOr<MatrixLayout> out =
      make_layout(call.c_type, n, m, p.ldc, p.batch, p.batch.stride_c);
  if (!out.ok()) return out.status();
  plan->out = *std::move(out);

  cublasLtMatmulPreference_t raw_pref = nullptr;
  if (absl::Status s =
          lt(cublasLtMatmulPreferenceCreate(&raw_pref), "cublasLtMatmulPreferenceCreate");
      !s.ok()) {
    return s;
  }
  Preference pref(raw_pref);
  const std::uint64_t ws = ctx.workspace_bytes;
  cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof ws);
  // cuBLASLt's A is our B and its B our A (the column-major view above).
  cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                       &align.b, sizeof align.b);
  cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                       &align.a, sizeof align.a);
  cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                       &align.c, sizeof align.c);
  cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                       &align.c, sizeof align.c);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (absl::Status s = lt(cublasLtMatmulAlgoGetHeuristic(
                              static_cast<cublasLtHandle_t>(ctx.cublaslt), plan->desc.get(),
                              plan->first.get(), plan->second.get(), plan->out.get(),
                              plan->out.get(), pref.get(), 1, &result, &returned),
                          "cublasLtMatmulAlgoGetHeuristic");
      !s.ok()) {
    return s;
  }
  if (returned == 0) {
    return absl::FailedPreconditionError(
        "cublaslt: the heuristic found no algorithm for this shape/layout/type");
  }
  plan->algo = result.algo;
  return plan;
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
  return cache().size();
}

absl::Status lt_matmul(const LtCall& call, const ExecContext& ctx) {
  const GemmProblem& p = *call.p;
  auto handle = static_cast<cublasLtHandle_t>(ctx.cublaslt);
  if (handle == nullptr) return absl::InternalError("cublaslt: no cuBLASLt handle in context");
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  // A pointer-array batch passes the device arrays where a single product passes its matrices.
  const bool arrays = p.batch.count > 1 && p.batch.has_arrays();
  const void* a =
      arrays ? static_cast<const void*>(p.batch.a_array) : (call.a != nullptr ? call.a : p.a);
  const void* b =
      arrays ? static_cast<const void*>(p.batch.b_array) : (call.b != nullptr ? call.b : p.b);
  void* c = arrays ? const_cast<void**>(p.batch.c_array) : p.c;
  int device = 0;
  cudaGetDevice(&device);
  const Alignments align = operand_alignments(p, arrays, a, b, c);
  const PlanKey key = {device,
                       reinterpret_cast<std::intptr_t>(handle),
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
                       align.a,
                       align.b,
                       align.c,
                       static_cast<std::int64_t>(ctx.workspace_bytes),
                       call.a_scale != nullptr,
                       call.fast_accum,
                       p.batch.count,
                       arrays,
                       arrays ? 0 : p.batch.stride_a,
                       arrays ? 0 : p.batch.stride_b,
                       arrays ? 0 : p.batch.stride_c};
  std::shared_ptr<const Plan> plan = cache().find(key);
  if (plan == nullptr) {
    absl::StatusOr<std::shared_ptr<const Plan>> made = make_plan(call, align, ctx);
    if (!made.ok()) return made.status();
    plan = *std::move(made);
    cache().add(key, plan);
  }
  // fp8: this call's scale pointers go in a descriptor of its own.
  MatmulDesc own_desc;
  if (call.a_scale != nullptr || call.b_scale != nullptr) {
    absl::StatusOr<MatmulDesc> d = make_desc(call);
    if (!d.ok()) return d.status();
    own_desc = *std::move(d);
  }
  cublasLtMatmulDesc_t desc = own_desc != nullptr ? own_desc.get() : plan->desc.get();
  const float alpha = static_cast<float>(p.alpha);
  const float beta = static_cast<float>(p.beta);
  return lt(cublasLtMatmul(handle, desc, &alpha, b, plan->first.get(), a, plan->second.get(), &beta,
                           c, plan->out.get(), c, plan->out.get(), &plan->algo, ctx.workspace,
                           ctx.workspace_bytes, static_cast<cudaStream_t>(ctx.stream)),
            "cublasLtMatmul");
}

}  // namespace matserve::kernels
