// CUDA backend: see cuda_backend.h. Creates the devices, picks one for each operation, and runs
// the operations through the execution plan (cuda_operation.h, execution_plan.h), uploads and
// downloads of resident matrices included (a stream slot for their staged copies). A sticky CUDA
// error marks the device unhealthy.
#include "server/runtime/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ipc_memory.h"
#include "kernels/cuda/launch_graphs.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/precision.h"
#include "server/runtime/cuda_device.h"
#include "server/runtime/cuda_operation.h"
#include "server/runtime/cuda_staging.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/out_of_core_plan.h"
#include "server/runtime/problem_builder.h"
#include "server/runtime/resident_store.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

// Each copying thread (the caller and every helper) keeps one chunk filling and one in flight.
int staging_chunks(const CudaBackendOptions& o) {
  return std::max(o.staging_chunks, 2 * (o.copy_threads + 1));
}

// Lets every device read and write every other one's memory directly (NVLink or PCIe peer to
// peer) where the hardware allows, for products spread over devices; elsewhere their copies go
// through host memory, more slowly, by the driver.
void enable_peer_access(const std::vector<CudaDevice*>& devices) {
  for (const CudaDevice* from : devices) {
    for (const CudaDevice* to : devices) {
      int can = 0;
      if (from->ordinal == to->ordinal ||
          cudaDeviceCanAccessPeer(&can, from->ordinal, to->ordinal) != cudaSuccess || can == 0) {
        continue;
      }
      cudaSetDevice(from->ordinal);
      if (cudaDeviceEnablePeerAccess(to->ordinal, 0) != cudaSuccess) {
        cudaGetLastError();  // already enabled (a second backend in one process): not sticky
      }
    }
  }
}

// What runs out of core: the operands as stored (no conversion on the device, no fp8 scaling), the
// result into host memory.
absl::Status out_of_core_supported(const GemmJob& job) {
  if (job.precision == kernels::Precision::kF8 ||
      kernels::kernel_operand_dtype(job.a.dtype, job.precision) != job.a.dtype ||
      job.b.dtype != job.a.dtype) {
    return absl::FailedPreconditionError(absl::StrCat(
        "precision: a product whose operands or result are too large for the device together "
        "runs out of core, on the operands as stored; precision ",
        std::string(kernels::precision_name(job.precision)), " on ",
        std::string(kernels::dtype_name(job.a.dtype)), " and ",
        std::string(kernels::dtype_name(job.b.dtype)),
        " data needs a conversion on the device: send the operands in the precision's own "
        "dtype"));
  }
  return absl::OkStatus();
}

absl::Status host_matrix_refused(const char* rpc) {
  return absl::FailedPreconditionError(absl::StrCat(
      rpc,
      ": an operand is kept in host memory (a matrix larger than a third of the device's "
      "budget); only Multiply (out of core), downloads and ranged reads use such a matrix"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(
    const CudaBackendOptions& options) {
  const int count = kernels::cuda_device_count();
  if (count == 0) return absl::FailedPreconditionError("backend cuda: no CUDA device is visible");
  std::vector<int> ordinals = options.devices;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend());  // NOLINT: private constructor
  backend->copier_ = std::make_unique<ParallelCopier>(options.copy_threads);
  for (int ordinal : ordinals) {
    if (ordinal < 0 || ordinal >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("devices: CUDA device ", ordinal, " does not exist (", count, " visible)"));
    }
    if (absl::Status s = cuda_status(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
    cudaDeviceProp prop{};
    if (absl::Status s = cuda_status(cudaGetDeviceProperties(&prop, ordinal), "properties");
        !s.ok()) {
      return s;
    }
    auto d = std::make_unique<CudaDevice>();
    d->index = static_cast<int>(backend->devices_.size());
    d->ordinal = ordinal;
    d->label = absl::StrCat("cuda:", ordinal);
    d->description.index = ordinal;
    d->description.name = prop.name;
    d->display_name = absl::StrCat(d->label, " ", prop.name);
    d->description.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
    d->description.memory_total_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    d->description.multiprocessors = prop.multiProcessorCount;
    // 90% of the device by default and at most: the rest holds the CUDA context, cuBLAS
    // workspaces and kernel modules. A larger --memory_budget_bytes (a manifest written for a
    // larger GPU) is clamped, and the server says so at start.
    const MemoryBudget chosen = choose_memory_budget(
        options.memory_budget_bytes, static_cast<std::int64_t>(prop.totalGlobalMem), 0.9, 0.9);
    const std::int64_t budget = chosen.bytes;
    d->description.memory_budget_bytes = budget;
    if (chosen.clamped) d->description.budget_requested_bytes = options.memory_budget_bytes;
    d->pool = std::make_unique<MemoryPool>(
        RawAllocator{
            .name = absl::StrCat(d->label, " device memory"),
            .allocate = [ordinal](std::size_t bytes) -> void* {
              void* p = nullptr;
              cudaSetDevice(ordinal);
              if (cudaMalloc(&p, bytes) != cudaSuccess) {
                cudaGetLastError();  // out of memory is not sticky; clear it
                return nullptr;
              }
              return p;
            },
            .release =
                [ordinal](void* p) {
                  cudaSetDevice(ordinal);
                  cudaFree(p);
                },
        },
        budget);
    d->scheduler = std::make_unique<DeviceScheduler>(d->label, options.streams_per_device,
                                                     options.max_queue, *d->pool);
    for (int i = 0; i < options.streams_per_device; ++i) {
      absl::StatusOr<kernels::StreamResources> r = kernels::StreamResources::create();
      if (!r.ok()) return r.status();
      absl::StatusOr<StagingRing> ring = StagingRing::create(
          options.staging_chunk_bytes, staging_chunks(options), backend->pinned_ranges_.get());
      if (!ring.ok()) return ring.status();
      absl::StatusOr<StageEvents> events = StageEvents::create();
      if (!events.ok()) return events.status();
      std::optional<kernels::LaunchGate> gate;
      if (options.gate_launches) {
        absl::StatusOr<kernels::LaunchGate> g = kernels::LaunchGate::create();
        if (!g.ok()) return g.status();
        gate = *std::move(g);
      }
      d->slots.push_back(StreamSlot{*std::move(r), *std::move(events), *std::move(ring),
                                    kernels::LaunchGraphs(static_cast<std::size_t>(std::max(
                                                              0, options.launch_graphs_per_stream)),
                                                          /*capture_on_sighting=*/2),
                                    std::move(gate)});
    }
    backend->devices_.push_back(std::move(d));
  }
  for (const auto& d : backend->devices_) backend->device_list_.push_back(d.get());
  backend->split_ = options.split;
  backend->host_matrices_ = std::make_unique<CudaHostMatrices>(options.max_host_matrix_bytes);
  backend->out_of_core_tile_ = options.out_of_core_tile;
  enable_peer_access(backend->device_list_);
  if (options.pinned_message_bytes > 0) {
    // Without it the server still works, staging every large buffer through the rings.
    absl::StatusOr<kernels::PinnedBuffer> region =
        kernels::allocate_pinned(options.pinned_message_bytes);
    if (!region.ok()) {
      std::fprintf(stderr, "matserve: no pinned message memory (%s); large buffers are staged\n",
                   std::string(region.status().message()).c_str());
    } else {
      backend->message_region_ = *std::move(region);
      backend->message_heap_ = std::make_unique<PinnedHeap>(backend->message_region_.data(),
                                                            backend->message_region_.size());
    }
  }
  return backend;
}

CudaBackend::~CudaBackend() {
  for (const auto& d : devices_) {
    cudaSetDevice(d->ordinal);
    cudaDeviceSynchronize();  // shutdown only: let in-flight work finish before freeing
  }
}

std::vector<DeviceDescription> CudaBackend::devices() const {
  std::vector<DeviceDescription> out;
  for (const auto& d : devices_) {
    DeviceDescription desc = d->description;
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaSetDevice(d->ordinal) == cudaSuccess &&
        cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
      desc.memory_free_bytes = static_cast<std::int64_t>(free_bytes);
    }
    out.push_back(desc);
  }
  return out;
}

std::vector<DeviceStats> CudaBackend::stats() const {
  std::vector<DeviceStats> out;
  for (const auto& d : devices_) {
    DeviceStats s{.label = d->label, .pool = d->pool->stats(), .scheduler = d->scheduler->stats()};
    for (const StreamSlot& slot : d->slots) {
      s.staging_pinned_bytes += static_cast<std::int64_t>(slot.staging.pinned_bytes());
    }
    out.push_back(s);
  }
  return out;
}

bool CudaBackend::healthy() const {
  for (const auto& d : devices_) {
    if (d->healthy.load()) return true;
  }
  return false;
}

CudaDevice* CudaBackend::least_loaded() {
  // Fewest jobs running or queued; among equals, the fewest bytes in use (resident matrices
  // included), so that uploads, which run no job, spread over the devices too.
  CudaDevice* best = nullptr;
  std::pair<int, std::int64_t> best_load;
  for (const auto& d : devices_) {
    if (!d->healthy.load()) continue;
    const SchedulerStats s = d->scheduler->stats();
    const std::pair<int, std::int64_t> load{s.running + s.queued, d->pool->stats().in_use_bytes};
    if (best == nullptr || load < best_load) {
      best = d.get();
      best_load = load;
    }
  }
  return best;
}

absl::StatusOr<CudaDevice*> CudaBackend::pick(std::span<const Operand* const> operands) {
  CudaDevice* chosen = nullptr;
  for (const Operand* o : operands) {
    if (o == nullptr || !o->is_resident() || in_host_memory(*o)) continue;
    CudaDevice* d = devices_[static_cast<std::size_t>(o->resident->device)].get();
    if (chosen != nullptr && chosen != d) {
      return absl::FailedPreconditionError(
          absl::StrCat("resident operands live on different devices (", chosen->label, " and ",
                       d->label, "): download and re-upload one of them"));
    }
    chosen = d;
  }
  if (chosen == nullptr) chosen = least_loaded();
  if (chosen == nullptr || !chosen->healthy.load()) {
    return absl::UnavailableError("the CUDA device is unhealthy after a device error");
  }
  return chosen;
}

bool CudaBackend::out_of_core(const GemmJob& job) {
  const Operand* operands[] = {&job.a, &job.b, job.c ? &*job.c : nullptr};
  CudaDevice* home = nullptr;
  for (const Operand* o : operands) {
    if (o == nullptr || !o->is_resident()) continue;
    if (in_host_memory(*o)) return true;
    home = devices_[static_cast<std::size_t>(o->resident->device)].get();
  }
  CudaDevice* d = home != nullptr ? home : least_loaded();
  if (d == nullptr) return false;
  const std::int64_t budget = d->pool->budget();
  if (job.keep_result && host_matrices_->wants(job.out_bytes(), budget)) return true;
  // Inline operands (in host memory already) that the in-core path could not admit together with
  // the result; a conversion on the device (fp32 data computed in 16 bits) stays in core.
  if (home != nullptr || kernels::kernel_operand_dtype(job.a.dtype, job.precision) != job.a.dtype) {
    return false;
  }
  const std::size_t in_core = MemoryPool::size_class(job.a.bytes()) +
                              MemoryPool::size_class(job.b.bytes()) +
                              MemoryPool::size_class(job.out_bytes());
  const PoolStats pool = d->pool->stats();
  const std::int64_t free_bytes = pool.request_bytes();
  if (static_cast<std::int64_t>(in_core) <= free_bytes) return false;
  // Out of core only where its tiles fit what the resident matrices leave; else the in-core
  // path refuses it, naming the budget, as before.
  const kernels::GemmProblem shape = gemm_problem(job, job.a.dtype, nullptr, nullptr, nullptr);
  return job.keep_result ? false : plan_out_of_core(shape, free_bytes, out_of_core_tile_).ok();
}

absl::Status CudaBackend::multiply(const GemmJob& job, const GemmChooser& choose,
                                   std::span<std::byte> out, const Waiter& waiter,
                                   Outcome& outcome) {
  const auto pick = [this](std::span<const Operand* const> o) { return this->pick(o); };
  if (out_of_core(job)) {
    if (absl::Status s = out_of_core_supported(job); !s.ok()) return s;
    CudaOperationContext context{pick, *copier_};
    context.host_matrices = host_matrices_.get();
    context.out_of_core_tile = out_of_core_tile_;
    return run_cuda_out_of_core_gemm(context, job, choose, out, waiter, outcome);
  }
  return run_cuda_gemm({pick, *copier_, &split_, device_list_}, job, choose, out, waiter, outcome);
}

absl::Status CudaBackend::multiply_batch(const GemmBatchJob& job, const GemmChooser& choose,
                                         const Waiter& waiter, Outcome& outcome) {
  for (const std::vector<Operand>* operands : {&job.a, &job.b, &job.c}) {
    for (const Operand& o : *operands) {
      if (in_host_memory(o)) return host_matrix_refused("MultiplyBatched");
    }
  }
  const auto pick = [this](std::span<const Operand* const> o) { return this->pick(o); };
  return run_cuda_gemm_batch({pick, *copier_}, job, choose, waiter, outcome);
}

absl::Status CudaBackend::transpose(const TransposeJob& job, const TransposeChooser& choose,
                                    std::span<std::byte> out, const Waiter& waiter,
                                    Outcome& outcome) {
  if (in_host_memory(job.a)) return host_matrix_refused("Transpose");
  const auto pick = [this](std::span<const Operand* const> o) { return this->pick(o); };
  return run_cuda_transpose({pick, *copier_}, job, choose, out, waiter, outcome);
}

void CudaBackend::copy_in_parallel(std::byte* to, const std::byte* from, std::size_t bytes) {
  constexpr std::size_t kPiece = std::size_t{8} << 20;
  const std::size_t pieces = (bytes + kPiece - 1) / kPiece;
  copier_->for_each(pieces, copier_->helpers(), [&](std::size_t i) {
    const std::size_t at = i * kPiece;
    std::memcpy(to + at, from + at, std::min(kPiece, bytes - at));
  });
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CudaBackend::create_resident(
    std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout, int device,
    const Waiter& /*waiter*/) {
  CudaDevice* d = device >= 0 && device < static_cast<int>(devices_.size())
                      ? devices_[static_cast<std::size_t>(device)].get()
                      : least_loaded();
  if (d == nullptr || !d->healthy.load()) {
    return absl::UnavailableError("the CUDA device is unhealthy after a device error");
  }
  const auto bytes = static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  if (host_matrices_->wants(bytes, d->pool->budget())) {
    return host_matrices_->create(rows, cols, dtype, layout);
  }
  absl::StatusOr<MemoryPool::Block> block = d->pool->allocate(bytes, /*long_lived=*/true);
  if (!block.ok()) return block.status();
  return make_resident(*std::move(block), rows, cols, dtype, layout, "", d->index, d->label);
}

absl::Status CudaBackend::write_resident(ResidentMatrix& m, std::size_t offset,
                                         std::span<const std::byte> bytes, const Waiter& waiter) {
  if (m.in_host_memory) {
    copy_in_parallel(static_cast<std::byte*>(m.block.data()) + offset, bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  const auto pick = [this](std::span<const Operand* const> o) { return this->pick(o); };
  return run_cuda_resident_write({pick, *copier_}, *devices_[static_cast<std::size_t>(m.device)], m,
                                 offset, bytes, waiter);
}

absl::Status CudaBackend::read_resident(ResidentMatrix& m, std::size_t offset,
                                        std::span<std::byte> out, const Waiter& waiter) {
  if (m.in_host_memory) {
    copy_in_parallel(out.data(), static_cast<const std::byte*>(m.block.data()) + offset,
                     out.size());
    return absl::OkStatus();
  }
  const auto pick = [this](std::span<const Operand* const> o) { return this->pick(o); };
  return run_cuda_resident_read({pick, *copier_}, *devices_[static_cast<std::size_t>(m.device)], m,
                                offset, out, waiter);
}

absl::StatusOr<OpenedDeviceMemory> CudaBackend::open_ipc_memory(std::span<const std::byte> handle) {
  if (devices_.empty()) return absl::FailedPreconditionError("ipc_handle: no CUDA device");
  absl::StatusOr<kernels::IpcMemory> opened =
      kernels::IpcMemory::open(handle, devices_.front()->ordinal);
  if (!opened.ok()) return opened.status();
  for (const auto& dev : devices_) {
    if (dev->ordinal != opened->ordinal()) continue;
    OpenedDeviceMemory m;
    m.device = dev->index;
    m.label = dev->label;
    m.base = static_cast<std::byte*>(opened->base());
    m.bytes = opened->bytes();
    m.keep = std::make_shared<kernels::IpcMemory>(*std::move(opened));
    return m;
  }
  return absl::FailedPreconditionError(
      absl::StrCat("ipc_handle: the memory is on CUDA device ", opened->ordinal(),
                   ", which this server does not use (--devices)"));
}

std::shared_ptr<void> CudaBackend::pin_host_memory(std::span<std::byte> bytes) {
  if (devices_.empty() || bytes.empty()) return nullptr;
  // Portable: pinned for every device's context, whichever device a request runs on.
  cudaSetDevice(devices_.front()->ordinal);
  if (cudaHostRegister(bytes.data(), bytes.size(), cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();  // not sticky; the region is then used through the staging rings
    return nullptr;
  }
  pinned_ranges_->add(bytes.data(), bytes.size());
  PinnedRanges* ranges = pinned_ranges_.get();
  const int ordinal = devices_.front()->ordinal;
  return std::shared_ptr<void>(bytes.data(), [ranges, ordinal](void* p) {
    ranges->remove(p);
    cudaSetDevice(ordinal);
    cudaHostUnregister(p);
  });
}

}  // namespace matserve::server
