// cuBLASLt fp8 (e4m3) GEMM variant: e4m3 operands with per-tensor dequant scales, fp32
// accumulate, bf16 or fp32 output, every operand order. fp32/fp16/bf16 data is quantized on the
// device (amax scale) into K-major scratch from the stream-ordered pool; e4m3 data is used as
// given (scale 1) when it is K-major already (A not transposed, B transposed, 16-byte rows), and
// repacked into that scratch otherwise. A batch of stacked products runs one product after another.
#include "kernels/cublaslt/cublaslt_fp8.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <limits>

#include "kernels/cublaslt/cublaslt_plan.h"
#include "kernels/cublaslt/fp8_quantize.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

constexpr std::int64_t round16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}
constexpr std::int64_t round256(std::int64_t v) {
  return (v + 255) / 256 * 256;
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Stream-ordered scratch from the device's default pool (which keeps freed memory for reuse:
// StreamResources sets its release threshold), freed (stream-ordered) when it goes out of scope.
class StreamScratch {
 public:
  // Nothing when bytes == 0.
  StreamScratch(std::size_t bytes, cudaStream_t s) : stream_(s) {
    if (bytes > 0) status_ = cudaMallocAsync(&ptr_, bytes, s);
  }
  ~StreamScratch() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  }
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  cudaError_t status() const { return status_; }
  unsigned char* bytes() const { return static_cast<unsigned char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_;
  cudaError_t status_ = cudaSuccess;
};

// Set once cuBLASLt has refused device-side A/B scale pointers for this process: from then on the
// scales are read back (one stream sync) and folded into alpha.
std::atomic<bool> g_fold_scales{false};
std::atomic<int> g_last_mode{
    0};  // 0 none, 1 device scale pointers, 2 folded into alpha, 3 as given

}  // namespace

const char* cublaslt_fp8_scale_mode() {
  switch (g_last_mode.load()) {
    case 1: return "per-tensor scales as device pointers (A_SCALE/B_SCALE)";
    case 2: return "per-tensor scales folded into alpha (read back after quantization)";
    case 3: return "e4m3 data as given, scale 1";
  }
  return "none";
}

absl::Status cublaslt_fp8_can_implement(const GemmProblem& p) {
  constexpr std::int64_t kMax = std::numeric_limits<int>::max();
  if (p.m > kMax || p.n > kMax || round16(p.k) > kMax || p.ldc > kMax) {
    return absl::FailedPreconditionError("variant 'cublaslt_fp8': dimensions must fit in 32 bits");
  }
  if (p.precision != Precision::kF8) {
    return absl::FailedPreconditionError("variant 'cublaslt_fp8': computes fp8 only");
  }
  if (p.out_type != DType::kBF16 && p.out_type != DType::kF32) {
    return absl::FailedPreconditionError("variant 'cublaslt_fp8': writes bf16 or fp32");
  }
  if (p.batch.count > 1 && p.batch.has_arrays()) {
    return absl::FailedPreconditionError(
        "variant 'cublaslt_fp8': a batch of separate matrices (pointer arrays, as resident handle "
        "lists give) is not taken; send the products stacked");
  }
  if (p.in_type == DType::kF8E4M3) return absl::OkStatus();  // any order: repacked when needed
  if (p.in_type != DType::kF32 && p.in_type != DType::kF16 && p.in_type != DType::kBF16) {
    return absl::FailedPreconditionError("variant 'cublaslt_fp8': unsupported operand type");
  }
  return absl::OkStatus();
}

bool cublaslt_fp8_capturable(const GemmProblem& p) {
  return p.in_type == DType::kF8E4M3;
}

absl::Status cublaslt_fp8_gemm(const GemmProblem& p, const ExecContext& ctx) {
  if (absl::Status s = cublaslt_fp8_can_implement(p); !s.ok()) return s;
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.batch.count > 1) {
    // Stacked products, one after another (each quantized with its own scales).
    const std::size_t in_size = dtype_size(p.in_type);
    const std::size_t out_size = dtype_size(p.out_type);
    for (std::int64_t z = 0; z < p.batch.count; ++z) {
      GemmProblem one = p;
      one.batch = GemmBatch{};
      const auto at = static_cast<std::size_t>(z);
      one.a = static_cast<const unsigned char*>(p.a) +
              at * static_cast<std::size_t>(p.batch.stride_a) * in_size;
      one.b = static_cast<const unsigned char*>(p.b) +
              at * static_cast<std::size_t>(p.batch.stride_b) * in_size;
      one.c = static_cast<unsigned char*>(p.c) +
              at * static_cast<std::size_t>(p.batch.stride_c) * out_size;
      if (absl::Status s = cublaslt_fp8_gemm(one, ctx); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  auto stream = static_cast<cudaStream_t>(ctx.stream);
  const bool quantize = p.in_type != DType::kF8E4M3;
  const std::size_t osize = dtype_size(p.out_type);
  // cuBLASLt's fp8 kernels want n (their m) divisible by 16 and 16-byte aligned C/D rows; when
  // the caller's C is not like that, D is computed n-padded in scratch and copied out.
  const std::int64_t n_pad = round16(p.n);
  const bool pad_c =
      n_pad != p.n || (p.ldc * static_cast<std::int64_t>(osize)) % 16 != 0 || !aligned16(p.c);
  // Operands go to K-major scratch (k padded to 16) when quantized, or when e4m3 data is not
  // already K-major with 16-byte rows: A not transposed, B transposed ("TN" to cuBLASLt).
  const bool k_padded = p.k % 16 != 0;
  const bool pack_a = quantize || k_padded || p.a_trans || p.lda % 16 != 0 || !aligned16(p.a);
  const bool pack_b =
      quantize || k_padded || n_pad != p.n || !p.b_trans || p.ldb % 16 != 0 || !aligned16(p.b);
  const std::int64_t ldq = round16(p.k);
  const std::int64_t ldd = pad_c ? n_pad : p.ldc;
  const std::int64_t a_bytes = pack_a ? round256(p.m * ldq) : 0;
  const std::int64_t b_bytes = pack_b ? round256(n_pad * ldq) : 0;
  const std::int64_t d_bytes = pad_c ? round256(p.m * ldd * static_cast<std::int64_t>(osize)) : 0;
  const std::int64_t scale_bytes = quantize ? 256 : 0;  // amax words and scales
  StreamScratch scratch(static_cast<std::size_t>(a_bytes + b_bytes + d_bytes + scale_bytes),
                        stream);
  if (absl::Status s = cuda_status(scratch.status(), "cudaMallocAsync"); !s.ok()) return s;
  unsigned char* base = scratch.bytes();
  auto* words = reinterpret_cast<unsigned int*>(base + a_bytes + b_bytes + d_bytes);
  auto* scales = reinterpret_cast<float*>(words + 4);  // 16-byte aligned

  GemmProblem q = p;
  LtCall call;
  call.a_type = CUDA_R_8F_E4M3;
  call.b_type = CUDA_R_8F_E4M3;
  call.c_type = lt_data_type(p.out_type);
  call.compute = CUBLAS_COMPUTE_32F;
  Fp8QuantizeArgs pack;
  pack.src_type = p.in_type;
  pack.cols = p.k;
  pack.ld_dst = ldq;
  if (pack_a) {
    Fp8QuantizeArgs qa = pack;
    qa.src = p.a;
    qa.rows = p.m;
    qa.ld = p.lda;
    qa.k_major = !p.a_trans;
    qa.dst = base;
    qa.amax_bits = words;
    qa.scale = scales;
    if (absl::Status s = cuda_status(launch_fp8_quantize(qa, stream), "fp8 pack A"); !s.ok()) {
      return s;
    }
    q.a = base;
    q.lda = ldq;
    q.a_trans = false;
  }
  if (pack_b) {
    Fp8QuantizeArgs qb = pack;
    qb.src = p.b;
    qb.rows = p.n;
    qb.rows_dst = n_pad;  // zero rows up to n_pad
    qb.ld = p.ldb;
    qb.k_major = p.b_trans;
    qb.dst = base + a_bytes;
    qb.amax_bits = words + 1;
    qb.scale = scales + 1;
    if (absl::Status s = cuda_status(launch_fp8_quantize(qb, stream), "fp8 pack B"); !s.ok()) {
      return s;
    }
    q.b = base + a_bytes;
    q.ldb = ldq;
    q.b_trans = true;
    q.n = n_pad;
  }
  if (k_padded) q.k = ldq;  // both packed: the padding columns hold zeros
  if (quantize) {
    call.a_scale = scales;
    call.b_scale = scales + 1;
  }
  void* d = base + a_bytes + b_bytes;
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
    g_last_mode.store(1);
  }
  if (quantize && g_fold_scales.load()) {
    float host_scales[2] = {1.0f, 1.0f};
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
    g_last_mode.store(2);
  }
  if (!quantize) {
    st = lt_matmul(call, ctx);
    g_last_mode.store(3);
  }
  if (!st.ok()) return st;
  if (pad_c) {
    return cuda_status(cudaMemcpy2DAsync(p.c, p.ldc * osize, d, ldd * osize, p.n * osize, p.m,
                                         cudaMemcpyDeviceToDevice, stream),
                       "cudaMemcpy2DAsync");
  }
  return absl::OkStatus();
}

}  // namespace matserve::kernels
