// The runtime's view of one operation: operands (views into the request's bytes, or resident
// matrices), options, and what comes back (the variant and device that ran, stage timings,
// optional verification, a resident result). No protobuf here: the service translates messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/cpu/reference.h"
#include "kernels/types.h"
#include "server/runtime/memory_pool.h"
#include "server/runtime/stage_trace.h"

namespace matserve::server {

// A dense matrix in host memory, not owned: rows * cols * dtype_size(dtype) bytes.
struct HostMatrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  kernels::DType dtype = kernels::DType::kF32;
  kernels::Layout layout = kernels::Layout::kRowMajor;
  std::span<const std::byte> data;

  std::size_t bytes() const {
    return static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  }
};

struct ResidentMatrix;
class SharedMemoryRegion;

// An operand: its shape always; its bytes either in `data` (inline) or in `resident`'s device
// memory (then `data` is empty).
struct Operand : HostMatrix {
  std::shared_ptr<ResidentMatrix> resident;
  // Where this operand's bytes start in `resident`'s block: 0, or one product's place in a
  // resident matrix that stacks a batch's matrices.
  std::size_t offset = 0;

  bool is_resident() const { return resident != nullptr; }
};

// Holds a resident matrix's lock for an operation: shared while reading it, exclusive for an
// in-place transpose, so its shape and bytes cannot change underneath. Movable.
class ResidentLock {
 public:
  ResidentLock(std::shared_ptr<ResidentMatrix> m, bool exclusive);
  ResidentLock(ResidentLock&& o) noexcept;
  ResidentLock& operator=(ResidentLock&&) = delete;
  ResidentLock(const ResidentLock&) = delete;
  ResidentLock& operator=(const ResidentLock&) = delete;
  ~ResidentLock();

 private:
  std::shared_ptr<ResidentMatrix> m_;
  bool exclusive_;
};

// Whether one product may be spread over several devices (cuda_split_gemm.h): as the server's
// flags say (above --split_gemm_min_flops), never, or whenever the server has another device free.
enum class SplitChoice { kDefault, kNever, kAlways };

// What a GEMM asks beyond its operands: op() on A and B, the scalars, the precision, the
// result's type and layout, verification, whether the result is kept and for whom, what the
// operation holds while it runs (locks, shared-memory regions) and where the result goes in
// shared memory.
struct GemmOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  double beta = 0.0;
  kernels::Precision precision = kernels::Precision::kF32;
  kernels::DType out_dtype = kernels::DType::kF32;
  kernels::Layout out_layout = kernels::Layout::kRowMajor;
  bool verify = false;
  std::int64_t verify_bytes = 0;  // host memory the float64 reference takes (with verify)
  bool keep_result = false;       // the result stays on the device (Outcome::result)
  SplitChoice split = SplitChoice::kDefault;
  std::string owner;                // who the resident result belongs to
  std::vector<ResidentLock> locks;  // held for the whole operation
  // Shared-memory regions the operands or the result live in, mapped for the whole operation.
  std::vector<std::shared_ptr<SharedMemoryRegion>> regions;
  // With output_shm: the result's place in its region (out_bytes() bytes), else empty.
  std::span<std::byte> shm_out;
  // With output_shm in a device region (CUDA IPC): a view of the result's place, else null.
  std::shared_ptr<ResidentMatrix> device_out;

  // op(A) is m x k, op(B) k x n, for A and B of these shapes.
  std::int64_t m(const HostMatrix& a) const { return transpose_a ? a.cols : a.rows; }
  std::int64_t k(const HostMatrix& a) const { return transpose_a ? a.rows : a.cols; }
  std::int64_t n(const HostMatrix& b) const { return transpose_b ? b.rows : b.cols; }
  std::size_t out_bytes(const HostMatrix& a, const HostMatrix& b) const {
    return static_cast<std::size_t>(m(a) * n(b)) * kernels::dtype_size(out_dtype);
  }
};

struct GemmJob : GemmOptions {
  Operand a;
  Operand b;
  std::optional<Operand> c;  // in out_dtype / out_layout; read when beta != 0
  // Bytes of the owner's --max_resident_bytes_per_owner left for kept transposed copies of its
  // fp8 operands (ResidentMatrix::transposed), which count against it. Asked only by a product
  // that would make such a copy (it takes the resident store's lock); empty: no limit.
  std::function<std::int64_t()> copy_room;

  std::int64_t m() const { return GemmOptions::m(a); }
  std::int64_t k() const { return GemmOptions::k(a); }
  std::int64_t n() const { return GemmOptions::n(b); }
  std::size_t out_bytes() const { return GemmOptions::out_bytes(a, b); }
};

// What every product of a batch shares: A's and B's shapes (no bytes), whether there is a C, and
// the options.
struct GemmShape : GemmOptions {
  HostMatrix a;  // rows, cols, dtype, layout; data empty
  HostMatrix b;
  bool has_c = false;

  std::int64_t m() const { return GemmOptions::m(a); }
  std::int64_t k() const { return GemmOptions::k(a); }
  std::int64_t n() const { return GemmOptions::n(b); }
  std::size_t out_bytes() const { return GemmOptions::out_bytes(a, b); }
};

// Products of one shape and one set of options computed in one launch: a MultiplyBatched
// request, or concurrent Multiply requests merged by the dynamic batcher. `shape` is what the
// products share; its locks and regions are held for the whole batch. a, b and c hold one operand
// per product, or one that every product uses (broadcast); c is empty when the products have no
// C. The operands' bytes are views, as in GemmJob.
struct GemmBatchJob {
  GemmShape shape;
  std::int64_t count = 1;
  std::vector<Operand> a;
  std::vector<Operand> b;
  std::vector<Operand> c;
  // Products whose result stays on the device (shape.keep_result): none of `outs` is used.
  // Otherwise where product i's result goes (shape.out_bytes() bytes): outs[i], or, with one span
  // for the whole batch, at i * shape.out_bytes() within it.
  std::vector<std::span<std::byte>> outs;
  // With shape.keep_result: the results kept as one resident matrix, stacked batch-major
  // (kept_dims), instead of one each.
  bool keep_stacked = false;

  const Operand& a_of(std::int64_t i) const {
    return a.size() == 1 ? a[0] : a[static_cast<std::size_t>(i)];
  }
  const Operand& b_of(std::int64_t i) const {
    return b.size() == 1 ? b[0] : b[static_cast<std::size_t>(i)];
  }
  const Operand* c_of(std::int64_t i) const {
    if (c.empty()) return nullptr;
    return c.size() == 1 ? &c[0] : &c[static_cast<std::size_t>(i)];
  }
  // Kept results (shape.keep_result) take long-lived blocks: one per product, or with
  // keep_stacked one for the whole batch. How many, their bytes, the shape of the resident matrix
  // each becomes (m x n; stacked batch-major: row-major (count * m) x n, column-major
  // m x (count * n)), and where product i's result goes (block index, byte offset in it).
  std::size_t kept_blocks() const { return keep_stacked ? 1 : static_cast<std::size_t>(count); }
  std::size_t kept_block_bytes() const {
    return keep_stacked ? static_cast<std::size_t>(count) * shape.out_bytes() : shape.out_bytes();
  }
  std::pair<std::int64_t, std::int64_t> kept_dims() const {
    if (!keep_stacked) return {shape.m(), shape.n()};
    if (shape.out_layout == kernels::Layout::kColMajor) return {shape.m(), count * shape.n()};
    return {count * shape.m(), shape.n()};
  }
  std::pair<std::size_t, std::size_t> kept_place(std::int64_t i) const {
    const auto at = static_cast<std::size_t>(i);
    return keep_stacked ? std::pair{std::size_t{0}, at * shape.out_bytes()}
                        : std::pair{at, std::size_t{0}};
  }
  std::span<std::byte> out_of(std::int64_t i) const {
    if (shape.keep_result) return {};
    if (outs.size() == 1 && count > 1) {
      return outs[0].subspan(static_cast<std::size_t>(i) * shape.out_bytes(), shape.out_bytes());
    }
    return outs[static_cast<std::size_t>(i)];
  }
};

// The batch's shape: `options` (moved in) for products with A and B shaped as `a` and `b`.
inline GemmShape gemm_shape(GemmOptions options, const HostMatrix& a, const HostMatrix& b,
                            bool has_c) {
  GemmShape s;
  static_cast<GemmOptions&>(s) = std::move(options);
  s.a = HostMatrix{a.rows, a.cols, a.dtype, a.layout, {}};
  s.b = HostMatrix{b.rows, b.cols, b.dtype, b.layout, {}};
  s.has_c = has_c;
  return s;
}

struct TransposeJob {
  Operand a;
  double scale = 1.0;
  bool verify = false;
  std::int64_t verify_bytes = 0;  // host memory the float64 reference takes (with verify)
  bool keep_result = false;
  bool in_place = false;  // a is resident and is overwritten by its transpose
  std::string owner;
  std::vector<ResidentLock> locks;
  std::vector<std::shared_ptr<SharedMemoryRegion>> regions;  // as GemmOptions::regions
  std::span<std::byte> shm_out;                              // as GemmOptions::shm_out
  std::shared_ptr<ResidentMatrix> device_out;                // as GemmOptions::device_out

  std::size_t out_bytes() const { return a.bytes(); }
};

// Microseconds per stage, as the reply reports them.
struct StageTimes {
  double queue_us = 0;
  double host_to_device_us = 0;
  double launch_us = 0;  // host time to enqueue the device work (CUDA); not part of kernel_us
  double kernel_us = 0;
  double device_to_host_us = 0;
  double total_us = 0;
  double batch_wait_us = 0;  // dynamic batching: waited for others to join (inside queue_us)
};

// Microseconds from `start` to now: how every stage above is measured on the host.
inline double micros_since(absl::Time start) {
  return absl::ToDoubleMicroseconds(absl::Now() - start);
}

struct Outcome {
  std::string variant;
  std::string device;
  StageTimes times;
  double work = 0;  // flops (GEMM) or bytes moved (transpose), for GFLOP/s and GB/s
  std::optional<kernels::ErrorStats> verification;
  std::shared_ptr<ResidentMatrix> result;  // keep_result: the new resident matrix (no handle yet)
  // A batch with keep_result: product i's new resident matrix at index i (no handles yet).
  std::vector<std::shared_ptr<ResidentMatrix>> results;
  // Dynamic batching: requests computed by this request's launch (1: it ran alone).
  int merged_requests = 1;
  // fp8 of data the server quantized: the per-tensor dequant scales each product used, A's and
  // B's, product i's at [2i] and [2i + 1]. Empty otherwise.
  std::vector<float> fp8_scales;
  // In-place transpose done out of place: the block holding the result, to replace the matrix's
  // own (the device work on it is finished). Empty otherwise.
  MemoryPool::Block replacement_block;
  StageMarks marks;  // host-side stage times, only while the stage trace is on
  // How the device work was enqueued (CUDA): "graph_replayed", "graph_captured" or "direct";
  // empty on the CPU backend.
  std::string launch_path;

  // work / kernel time in units of 1e9 per second (GFLOP/s or GB/s).
  double rate() const { return times.kernel_us > 0 ? work / (times.kernel_us * 1e3) : 0.0; }
};

}  // namespace matserve::server
