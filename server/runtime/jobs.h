// The runtime's view of one operation: operands (views into the request's bytes, or resident
// matrices), options, and what comes back (the variant and device that ran, stage timings,
// optional verification, a resident result). No protobuf here: the service translates messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

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

struct GemmJob {
  Operand a;
  Operand b;
  std::optional<Operand> c;  // in out_dtype / out_layout; read when beta != 0
  bool transpose_a = false;
  bool transpose_b = false;
  double alpha = 1.0;
  double beta = 0.0;
  kernels::Precision precision = kernels::Precision::kF32;
  kernels::DType out_dtype = kernels::DType::kF32;
  kernels::Layout out_layout = kernels::Layout::kRowMajor;
  bool verify = false;
  std::int64_t verify_bytes = 0;    // host memory the float64 reference takes (with verify)
  bool keep_result = false;         // the result stays on the device (Outcome::result)
  std::string owner;                // who the resident result belongs to
  std::vector<ResidentLock> locks;  // held for the whole operation
  // Shared-memory regions the operands or the result live in, mapped for the whole operation.
  std::vector<std::shared_ptr<SharedMemoryRegion>> regions;
  // With output_shm: the result's place in its region (job.out_bytes() bytes), else empty.
  std::span<std::byte> shm_out;
  // With output_shm in a device region (CUDA IPC): a view of the result's place, else null.
  std::shared_ptr<ResidentMatrix> device_out;

  std::int64_t m() const { return transpose_a ? a.cols : a.rows; }
  std::int64_t k() const { return transpose_a ? a.rows : a.cols; }
  std::int64_t n() const { return transpose_b ? b.rows : b.cols; }
  std::size_t out_bytes() const {
    return static_cast<std::size_t>(m() * n()) * kernels::dtype_size(out_dtype);
  }
};

struct TransposeJob {
  Operand a;
  double scale = 1.0;
  bool verify = false;
  std::int64_t verify_bytes = 0;  // host memory the float64 reference takes (with verify)
  bool keep_result = false;
  bool in_place = false;  // a is resident and is overwritten by its transpose
  std::string owner;
  std::vector<ResidentLock> locks;
  std::vector<std::shared_ptr<SharedMemoryRegion>> regions;  // as GemmJob::regions
  std::span<std::byte> shm_out;                              // as GemmJob::shm_out
  std::shared_ptr<ResidentMatrix> device_out;                // as GemmJob::device_out

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
};

struct Outcome {
  std::string variant;
  std::string device;
  StageTimes times;
  double work = 0;  // flops (GEMM) or bytes moved (transpose), for GFLOP/s and GB/s
  std::optional<kernels::ErrorStats> verification;
  std::shared_ptr<ResidentMatrix> result;  // keep_result: the new resident matrix (no handle yet)
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
