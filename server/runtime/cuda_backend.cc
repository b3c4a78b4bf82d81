// CUDA backend: see cuda_backend.h. Device memory comes from each GPU's stream-ordered pool
// (cudaMallocAsync with the release threshold raised, so freed blocks stay cached and steady-state
// requests never reach cudaMalloc). A sticky CUDA error marks the device unhealthy.
#include "server/runtime/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/precision.h"
#include "server/runtime/problem_builder.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

// Errors after which the context is unusable: the device must stop serving.
bool is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorUnknown: return true;
    default: return false;
  }
}

// Device memory from the stream-ordered pool, returned to it (on the same stream) when dropped.
class PoolBuffer {
 public:
  PoolBuffer(void* p, cudaStream_t s) : ptr_(p), stream_(s) {}
  PoolBuffer(PoolBuffer&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)), stream_(o.stream_) {}
  PoolBuffer(const PoolBuffer&) = delete;
  PoolBuffer& operator=(const PoolBuffer&) = delete;
  PoolBuffer& operator=(PoolBuffer&&) = delete;
  ~PoolBuffer() {
    if (ptr_ != nullptr) cudaFreeAsync(ptr_, stream_);
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_;
  cudaStream_t stream_;
};

absl::StatusOr<PoolBuffer> pool_alloc(std::size_t bytes, cudaStream_t s) {
  void* p = nullptr;
  if (absl::Status st = cuda_status(cudaMallocAsync(&p, bytes == 0 ? 1 : bytes, s), "cudaMallocAsync");
      !st.ok()) {
    return st;
  }
  return PoolBuffer(p, s);
}

double elapsed_us(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, from, to);
  return static_cast<double>(ms) * 1e3;
}

}  // namespace

// One stream with its library handles and the four events that bracket a request's stages.
struct CudaBackend::StreamSlot {
  kernels::StreamResources resources;
  kernels::Event events[4];
};

struct CudaBackend::Device {
  int ordinal = 0;
  DeviceDescription description;
  std::vector<StreamSlot> slots;
  absl::Mutex mu;
  std::vector<int> free_slots ABSL_GUARDED_BY(mu);
  std::atomic<int> in_flight{0};
  std::atomic<bool> healthy{true};

  bool has_free_slot() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return !free_slots.empty(); }
};

// A stream held by one request; returned to its device's free list when dropped.
class CudaBackend::Lease {
 public:
  Lease(Device* d, int slot) : device_(d), slot_(slot) {}
  Lease(Lease&& o) noexcept : device_(std::exchange(o.device_, nullptr)), slot_(o.slot_) {}
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  Lease& operator=(Lease&&) = delete;
  ~Lease() {
    if (device_ == nullptr) return;
    absl::MutexLock lock(&device_->mu);
    device_->free_slots.push_back(slot_);
    device_->in_flight.fetch_sub(1);
  }
  Device& device() const { return *device_; }
  StreamSlot& slot() const { return device_->slots[static_cast<std::size_t>(slot_)]; }
  cudaStream_t stream() const { return slot().resources.stream(); }

 private:
  Device* device_;
  int slot_;
};

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& options) {
  const int count = kernels::cuda_device_count();
  if (count == 0) return absl::FailedPreconditionError("backend cuda: no CUDA device is visible");
  std::vector<int> ordinals = options.devices;
  if (ordinals.empty()) {
    for (int i = 0; i < count; ++i) ordinals.push_back(i);
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend());  // NOLINT: private constructor
  for (int ordinal : ordinals) {
    if (ordinal < 0 || ordinal >= count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "devices: CUDA device ", ordinal, " does not exist (", count, " visible)"));
    }
    if (absl::Status s = cuda_status(cudaSetDevice(ordinal), "cudaSetDevice"); !s.ok()) return s;
    cudaDeviceProp prop{};
    if (absl::Status s = cuda_status(cudaGetDeviceProperties(&prop, ordinal), "properties");
        !s.ok()) {
      return s;
    }
    // Keep freed blocks in the stream-ordered pool instead of returning them to the driver.
    cudaMemPool_t pool = nullptr;
    if (absl::Status s = cuda_status(cudaDeviceGetDefaultMemPool(&pool, ordinal), "mempool");
        !s.ok()) {
      return s;
    }
    std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);

    auto device = std::make_unique<Device>();
    device->ordinal = ordinal;
    device->description.index = ordinal;
    device->description.name = prop.name;
    device->description.compute_capability = absl::StrCat(prop.major, ".", prop.minor);
    device->description.memory_total_bytes = static_cast<std::int64_t>(prop.totalGlobalMem);
    device->description.multiprocessors = prop.multiProcessorCount;
    for (int i = 0; i < options.streams_per_device; ++i) {
      absl::StatusOr<kernels::StreamResources> r = kernels::StreamResources::create();
      if (!r.ok()) return r.status();
      StreamSlot slot{*std::move(r), {}};
      for (kernels::Event& e : slot.events) {
        absl::StatusOr<kernels::Event> ev = kernels::create_event();
        if (!ev.ok()) return ev.status();
        e = *std::move(ev);
      }
      device->slots.push_back(std::move(slot));
      absl::MutexLock lock(&device->mu);
      device->free_slots.push_back(i);
    }
    backend->devices_.push_back(std::move(device));
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

bool CudaBackend::healthy() const {
  for (const auto& d : devices_) {
    if (d->healthy.load()) return true;
  }
  return false;
}

absl::StatusOr<CudaBackend::Lease> CudaBackend::acquire(absl::Time deadline) {
  Device* best = nullptr;
  for (const auto& d : devices_) {
    if (!d->healthy.load()) continue;
    if (best == nullptr || d->in_flight.load() < best->in_flight.load()) best = d.get();
  }
  if (best == nullptr) {
    return absl::UnavailableError("every CUDA device is unhealthy after a device error");
  }
  best->in_flight.fetch_add(1);
  absl::MutexLock lock(&best->mu);
  if (!best->mu.AwaitWithDeadline(absl::Condition(best, &Device::has_free_slot), deadline)) {
    best->in_flight.fetch_sub(1);
    return absl::DeadlineExceededError("deadline passed while queued for a CUDA stream");
  }
  const int slot = best->free_slots.back();
  best->free_slots.pop_back();
  return Lease(best, slot);
}

namespace {

// Finishes a request's stream work; a sticky error takes the device out of service.
absl::Status finish(cudaStream_t stream, std::atomic<bool>& healthy) {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess && is_sticky(e)) healthy.store(false);
  return cuda_status(e, "device work");
}

std::string device_label(int ordinal, const std::string& name) {
  return absl::StrCat("cuda:", ordinal, " ", name);
}

}  // namespace

absl::Status CudaBackend::multiply(const GemmJob& job, const kernels::GemmVariant& v,
                                   std::span<std::byte> out, absl::Time deadline,
                                   Outcome& outcome) {
  const absl::Time queued = absl::Now();
  absl::StatusOr<Lease> lease = acquire(deadline);
  if (!lease.ok()) return lease.status();
  outcome.times.queue_us = absl::ToDoubleMicroseconds(absl::Now() - queued);
  Device& dev = lease->device();
  if (absl::Status s = cuda_status(cudaSetDevice(dev.ordinal), "cudaSetDevice"); !s.ok()) return s;
  cudaStream_t s = lease->stream();
  kernels::Event* ev = lease->slot().events;

  const bool read_c = job.c.has_value() && job.beta != 0.0;
  absl::StatusOr<PoolBuffer> da = pool_alloc(job.a.bytes(), s);
  absl::StatusOr<PoolBuffer> db = pool_alloc(job.b.bytes(), s);
  absl::StatusOr<PoolBuffer> dc = pool_alloc(out.size(), s);
  if (!da.ok()) return da.status();
  if (!db.ok()) return db.status();
  if (!dc.ok()) return dc.status();

  cudaEventRecord(ev[0].get(), s);
  cudaMemcpyAsync(da->get(), job.a.data.data(), job.a.bytes(), cudaMemcpyHostToDevice, s);
  cudaMemcpyAsync(db->get(), job.b.data.data(), job.b.bytes(), cudaMemcpyHostToDevice, s);
  if (read_c) cudaMemcpyAsync(dc->get(), job.c->data.data(), out.size(), cudaMemcpyHostToDevice, s);
  cudaEventRecord(ev[1].get(), s);

  // fp32 data computed in fp16/bf16: round the operands on the device first (part of "kernel").
  const kernels::DType operand = kernels::kernel_operand_dtype(job.a.dtype, job.precision);
  const void* a_ptr = da->get();
  const void* b_ptr = db->get();
  std::optional<PoolBuffer> ca;
  std::optional<PoolBuffer> cb;
  if (operand != job.a.dtype) {
    const auto count_a = job.a.rows * job.a.cols;
    const auto count_b = job.b.rows * job.b.cols;
    absl::StatusOr<PoolBuffer> ta = pool_alloc(count_a * kernels::dtype_size(operand), s);
    absl::StatusOr<PoolBuffer> tb = pool_alloc(count_b * kernels::dtype_size(operand), s);
    if (!ta.ok()) return ta.status();
    if (!tb.ok()) return tb.status();
    if (absl::Status st = cuda_status(
            kernels::launch_convert(da->get(), job.a.dtype, ta->get(), operand, count_a, s),
            "convert A");
        !st.ok()) {
      return st;
    }
    if (absl::Status st = cuda_status(
            kernels::launch_convert(db->get(), job.b.dtype, tb->get(), operand, count_b, s),
            "convert B");
        !st.ok()) {
      return st;
    }
    ca.emplace(*std::move(ta));
    cb.emplace(*std::move(tb));
    a_ptr = ca->get();
    b_ptr = cb->get();
  }
  const kernels::GemmProblem p = gemm_problem(job, operand, a_ptr, b_ptr, dc->get());
  const kernels::StreamResources& res = lease->slot().resources;
  if (absl::Status st = v.launch(p, res.context()); !st.ok()) {
    (void)finish(s, dev.healthy);
    return st;
  }
  cudaEventRecord(ev[2].get(), s);
  cudaMemcpyAsync(out.data(), dc->get(), out.size(), cudaMemcpyDeviceToHost, s);
  cudaEventRecord(ev[3].get(), s);
  if (absl::Status st = finish(s, dev.healthy); !st.ok()) return st;

  outcome.times.host_to_device_us = elapsed_us(ev[0].get(), ev[1].get());
  outcome.times.kernel_us = elapsed_us(ev[1].get(), ev[2].get());
  outcome.times.device_to_host_us = elapsed_us(ev[2].get(), ev[3].get());
  outcome.variant = std::string(v.name);
  outcome.device = device_label(dev.ordinal, dev.description.name);
  outcome.work = kernels::gemm_flops(p);
  return absl::OkStatus();
}

absl::Status CudaBackend::transpose(const TransposeJob& job, const kernels::TransposeVariant& v,
                                    std::span<std::byte> out, absl::Time deadline,
                                    Outcome& outcome) {
  const absl::Time queued = absl::Now();
  absl::StatusOr<Lease> lease = acquire(deadline);
  if (!lease.ok()) return lease.status();
  outcome.times.queue_us = absl::ToDoubleMicroseconds(absl::Now() - queued);
  Device& dev = lease->device();
  if (absl::Status s = cuda_status(cudaSetDevice(dev.ordinal), "cudaSetDevice"); !s.ok()) return s;
  cudaStream_t s = lease->stream();
  kernels::Event* ev = lease->slot().events;

  absl::StatusOr<PoolBuffer> din = pool_alloc(job.a.bytes(), s);
  absl::StatusOr<PoolBuffer> dout = pool_alloc(out.size(), s);
  if (!din.ok()) return din.status();
  if (!dout.ok()) return dout.status();
  cudaEventRecord(ev[0].get(), s);
  cudaMemcpyAsync(din->get(), job.a.data.data(), job.a.bytes(), cudaMemcpyHostToDevice, s);
  cudaEventRecord(ev[1].get(), s);
  const kernels::TransposeProblem p = transpose_problem(job, din->get(), dout->get());
  if (absl::Status st = v.launch(p, lease->slot().resources.context()); !st.ok()) {
    (void)finish(s, dev.healthy);
    return st;
  }
  cudaEventRecord(ev[2].get(), s);
  cudaMemcpyAsync(out.data(), dout->get(), out.size(), cudaMemcpyDeviceToHost, s);
  cudaEventRecord(ev[3].get(), s);
  if (absl::Status st = finish(s, dev.healthy); !st.ok()) return st;

  outcome.times.host_to_device_us = elapsed_us(ev[0].get(), ev[1].get());
  outcome.times.kernel_us = elapsed_us(ev[1].get(), ev[2].get());
  outcome.times.device_to_host_us = elapsed_us(ev[2].get(), ev[3].get());
  outcome.variant = std::string(v.name);
  outcome.device = device_label(dev.ordinal, dev.description.name);
  outcome.work = kernels::transpose_bytes(p);
  return absl::OkStatus();
}

}  // namespace matserve::server
