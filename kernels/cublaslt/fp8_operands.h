// The e4m3 operands the fp8 GEMMs (cuBLASLt's and the wgmma kernel) read: both K-major (A stored
// m x k, B stored n x k) with 16-byte rows, and their per-tensor dequant scales on the device.
// fp32/fp16/bf16 data is quantized (amax / 448 scales) and e4m3 data not already in that layout
// is repacked, into stream-ordered scratch; K-major e4m3 data is read in place with no scale.
// Internal to the fp8 variants.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/gemm_problem.h"

namespace matserve::kernels {

// The K-major rows' padding (k rounded up to 16 bytes of e4m3) and alignment the fp8 GEMMs read.
constexpr std::int64_t round16(std::int64_t v) {
  return (v + 15) / 16 * 16;
}
inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Stream-ordered scratch from the device's default pool (which keeps freed memory for reuse:
// StreamResources sets its release threshold), freed (stream-ordered) when it goes out of scope.
class StreamScratch {
 public:
  StreamScratch() = default;
  // Nothing when bytes == 0.
  StreamScratch(std::size_t bytes, cudaStream_t s);
  ~StreamScratch();
  StreamScratch(StreamScratch&& other) noexcept;
  StreamScratch& operator=(StreamScratch&& other) noexcept;
  StreamScratch(const StreamScratch&) = delete;
  StreamScratch& operator=(const StreamScratch&) = delete;
  cudaError_t status() const { return status_; }
  unsigned char* bytes() const { return static_cast<unsigned char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaError_t status_ = cudaSuccess;
};

// What a GEMM needs beyond K-major 16-byte rows: B's rows padded with zeros up to b_rows (>= n;
// the prepared problem's n is then b_rows), and k padded to a multiple of 16 (both operands
// packed, the padding zero).
struct Fp8Layout {
  std::int64_t b_rows = 0;  // 0: n
  bool pad_k16 = false;
  std::size_t extra_bytes = 0;  // more scratch for the caller, 256-byte aligned (extra())
};

class Fp8Operands {
 public:
  // Enqueues the quantize / repack passes on `stream` that `p` needs.
  static absl::StatusOr<Fp8Operands> prepare(const GemmProblem& p, const Fp8Layout& layout,
                                             cudaStream_t stream);

  // `p` over the prepared operands: a_trans false, b_trans true, e4m3.
  const GemmProblem& problem() const { return q_; }
  // Device dequant scales, null for e4m3 data (scale 1).
  const float* a_scale() const { return a_scale_; }
  const float* b_scale() const { return b_scale_; }
  bool quantized() const { return a_scale_ != nullptr; }
  unsigned char* extra() const { return extra_; }

 private:
  StreamScratch scratch_;
  GemmProblem q_;
  const float* a_scale_ = nullptr;
  const float* b_scale_ = nullptr;
  unsigned char* extra_ = nullptr;
};

// What every fp8 variant refuses, with its name in the message: a precision other than fp8,
// operands neither e4m3 nor fp32/fp16/bf16, a batch of pointer arrays without their host copies.
absl::Status fp8_operands_refusal(const char* variant, const GemmProblem& p);

// Runs `one` on each product of a batch, one after another: a stacked (strided) batch, or one of
// separate matrices through the host's copy of its pointer arrays; a single product goes to `one`
// as it is.
absl::Status for_each_product(const GemmProblem& p,
                              const std::function<absl::Status(const GemmProblem&)>& one);

}  // namespace matserve::kernels
