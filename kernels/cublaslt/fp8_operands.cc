// The K-major e4m3 operands of the fp8 GEMMs: scratch, the quantize / repack passes, and the
// batch loop (fp8_operands.h).
#include "kernels/cublaslt/fp8_operands.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cublaslt/fp8_quantize.h"
#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

constexpr std::int64_t round256(std::int64_t v) {
  return (v + 255) / 256 * 256;
}

}  // namespace

StreamScratch::StreamScratch(std::size_t bytes, cudaStream_t s) : stream_(s) {
  if (bytes > 0) status_ = cudaMallocAsync(&ptr_, bytes, s);
}

StreamScratch::~StreamScratch() {
  if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
}

StreamScratch::StreamScratch(StreamScratch&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), stream_(other.stream_), status_(other.status_) {}

StreamScratch& StreamScratch::operator=(StreamScratch&& other) noexcept {
  if (this != &other) {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
    ptr_ = std::exchange(other.ptr_, nullptr);
    stream_ = other.stream_;
    status_ = other.status_;
  }
  return *this;
}

absl::StatusOr<Fp8Operands> Fp8Operands::prepare(const GemmProblem& p, const Fp8Layout& layout,
                                                 cudaStream_t stream) {
  const bool quantize = p.in_type != DType::kF8E4M3;
  const std::int64_t b_rows = layout.b_rows > p.n ? layout.b_rows : p.n;
  const bool k_short = layout.pad_k16 && p.k % 16 != 0;
  const bool pack_a = quantize || k_short || p.a_trans || p.lda % 16 != 0 || !aligned16(p.a);
  const bool pack_b =
      quantize || k_short || b_rows != p.n || !p.b_trans || p.ldb % 16 != 0 || !aligned16(p.b);
  const std::int64_t ldq = round16(p.k);
  const std::int64_t a_bytes = pack_a ? round256(p.m * ldq) : 0;
  const std::int64_t b_bytes = pack_b ? round256(b_rows * ldq) : 0;
  const auto extra_bytes = round256(static_cast<std::int64_t>(layout.extra_bytes));
  const std::int64_t scale_bytes = quantize ? 256 : 0;  // amax words and scales
  Fp8Operands out;
  out.scratch_ = StreamScratch(
      static_cast<std::size_t>(a_bytes + b_bytes + extra_bytes + scale_bytes), stream);
  if (absl::Status s = cuda_status(out.scratch_.status(), "cudaMallocAsync"); !s.ok()) return s;
  unsigned char* base = out.scratch_.bytes();
  out.extra_ = extra_bytes > 0 ? base + a_bytes + b_bytes : nullptr;
  auto* words = reinterpret_cast<unsigned int*>(base + a_bytes + b_bytes + extra_bytes);
  auto* scales = reinterpret_cast<float*>(words + 4);  // 16-byte aligned

  out.q_ = p;
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
    out.q_.a = base;
    out.q_.lda = ldq;
    out.q_.a_trans = false;
  }
  if (pack_b) {
    Fp8QuantizeArgs qb = pack;
    qb.src = p.b;
    qb.rows = p.n;
    qb.rows_dst = b_rows;  // zero rows up to b_rows
    qb.ld = p.ldb;
    qb.k_major = p.b_trans;
    qb.dst = base + a_bytes;
    qb.amax_bits = words + 1;
    qb.scale = scales + 1;
    if (absl::Status s = cuda_status(launch_fp8_quantize(qb, stream), "fp8 pack B"); !s.ok()) {
      return s;
    }
    out.q_.b = base + a_bytes;
    out.q_.ldb = ldq;
    out.q_.b_trans = true;
    out.q_.n = b_rows;
  }
  out.q_.in_type = DType::kF8E4M3;
  if (k_short) out.q_.k = ldq;  // both packed: the padding columns hold zeros
  if (quantize) {
    out.a_scale_ = scales;
    out.b_scale_ = scales + 1;
    if (p.fp8_scales_out != nullptr) {
      if (absl::Status s = cuda_status(cudaMemcpyAsync(p.fp8_scales_out, scales, 2 * sizeof(float),
                                                       cudaMemcpyDefault, stream),
                                       "fp8 scales out");
          !s.ok()) {
        return s;
      }
    }
  }
  return out;
}

absl::Status fp8_operands_refusal(const char* variant, const GemmProblem& p) {
  if (p.precision != Precision::kF8) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", variant, "': computes fp8 only"));
  }
  if (p.batch.count > 1 && p.batch.has_arrays() && p.batch.host_a_array == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "variant '", variant,
        "': a batch of separate matrices needs the host's copy of its pointer arrays"));
  }
  if (p.in_type != DType::kF8E4M3 && p.in_type != DType::kF32 && p.in_type != DType::kF16 &&
      p.in_type != DType::kBF16) {
    return absl::FailedPreconditionError(
        absl::StrCat("variant '", variant, "': unsupported operand type"));
  }
  return absl::OkStatus();
}

absl::Status for_each_product(const GemmProblem& p,
                              const std::function<absl::Status(const GemmProblem&)>& one) {
  if (p.batch.count <= 1) return one(p);
  const std::size_t in_size = dtype_size(p.in_type);
  const std::size_t out_size = dtype_size(p.out_type);
  for (std::int64_t z = 0; z < p.batch.count; ++z) {
    GemmProblem each = p;
    each.batch = GemmBatch{};
    const auto at = static_cast<std::size_t>(z);
    if (p.fp8_scales_out != nullptr) each.fp8_scales_out = p.fp8_scales_out + 2 * at;
    if (p.batch.has_arrays()) {  // separate matrices: the host's copy of the pointers
      each.a = p.batch.host_a_array[at];
      each.b = p.batch.host_b_array[at];
      each.c = p.batch.host_c_array[at];
      if (absl::Status s = one(each); !s.ok()) return s;
      continue;
    }
    each.a = static_cast<const unsigned char*>(p.a) +
             at * static_cast<std::size_t>(p.batch.stride_a) * in_size;
    each.b = static_cast<const unsigned char*>(p.b) +
             at * static_cast<std::size_t>(p.batch.stride_b) * in_size;
    each.c = static_cast<unsigned char*>(p.c) +
             at * static_cast<std::size_t>(p.batch.stride_c) * out_size;
    if (absl::Status s = one(each); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace matserve::kernels
