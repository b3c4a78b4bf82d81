// CUDA backend: see cuda_backend.h. Every request: admission (slot + all its device memory at
// once), staged copies in, the chosen kernel between CUDA events, staged copies out. Early returns
// after device work was queued synchronize the stream first, so no block goes back to the pool
// while a copy or kernel may still touch it. A sticky CUDA error marks the device unhealthy.
#include "server/runtime/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/ipc_memory.h"
#include "kernels/cuda/launch_graphs.h"
#include "kernels/cuda/stream_resources.h"
#include "kernels/precision.h"
#include "server/runtime/batch_placement.h"
#include "server/runtime/cuda_staging.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/problem_builder.h"

namespace matserve::server {
namespace {

using kernels::cuda_status;

// Each copying thread (the caller and every helper) keeps one chunk filling and one in flight.
int staging_chunks(const CudaBackendOptions& o) {
  return std::max(o.staging_chunks, 2 * (o.copy_threads + 1));
}

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

double elapsed_us(cudaEvent_t from, cudaEvent_t to) {
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, from, to);
  return static_cast<double>(ms) * 1e3;
}

// Finishes a request's stream work; a sticky error takes the device out of service.
absl::Status finish(cudaStream_t stream, std::atomic<bool>& healthy) {
  cudaError_t e = cudaStreamSynchronize(stream);
  if (e == cudaSuccess) e = cudaGetLastError();
  if (e != cudaSuccess && is_sticky(e)) healthy.store(false);
  return cuda_status(e, "device work");
}

// Enqueues a request's device work: `enqueue` records the kernel events and launches the kernels.
// Through the slot's graph of this launch when it has one or can capture one, so the device runs
// it without waiting for the host's per-kernel setup; directly otherwise. Sets the launch stage's
// host time (capture included when it happened here) and path.
absl::Status enqueue_device_work(kernels::LaunchGraphs& graphs, const kernels::LaunchKey& key,
                                 bool capturable, cudaStream_t s,
                                 absl::FunctionRef<absl::Status()> enqueue, Outcome& outcome) {
  const absl::Time start = absl::Now();
  absl::StatusOr<kernels::LaunchGraphs::Prepared> graph =
      capturable ? graphs.prepare(key, s, enqueue) : kernels::LaunchGraphs::Prepared{};
  if (!graph.ok()) return graph.status();
  outcome.marks.mark(graph->captured_now ? "graph_capture" : "graph_lookup");
  if (graph->exec != nullptr) {
    if (absl::Status st = kernels::LaunchGraphs::launch(graph->exec, s); !st.ok()) return st;
    outcome.launch_path = graph->captured_now ? "graph_captured" : "graph_replayed";
  } else {
    if (absl::Status st = enqueue(); !st.ok()) return st;
    outcome.launch_path = "direct";
  }
  outcome.times.launch_us = micros_since(start);
  return absl::OkStatus();
}

}  // namespace

// One stream with its library handles, the events that bracket a request's stages (H2D start,
// kernel start, kernel end, H2D end), its pinned staging ring, and the graphs of its recent
// launches (used only by the request holding the slot).
struct CudaBackend::StreamSlot {
  kernels::StreamResources resources;
  kernels::Event events[4];
  StagingRing staging;
  kernels::LaunchGraphs graphs;
};

struct CudaBackend::Device {
  int index = 0;    // in devices_ (what ResidentMatrix::device names)
  int ordinal = 0;  // CUDA device ordinal
  std::string label;
  std::string display_name;  // "cuda:0 NVIDIA H100 80GB HBM3", what replies name
  DeviceDescription description;
  std::unique_ptr<MemoryPool> pool;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::vector<StreamSlot> slots;
  std::atomic<bool> healthy{true};
};

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
    auto d = std::make_unique<Device>();
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
      StreamSlot slot{*std::move(r),
                      {},
                      *std::move(ring),
                      kernels::LaunchGraphs(
                          static_cast<std::size_t>(std::max(0, options.launch_graphs_per_stream)),
                          /*capture_on_sighting=*/2)};
      for (kernels::Event& e : slot.events) {
        absl::StatusOr<kernels::Event> ev = kernels::create_event();
        if (!ev.ok()) return ev.status();
        e = *std::move(ev);
      }
      d->slots.push_back(std::move(slot));
    }
    backend->devices_.push_back(std::move(d));
  }
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

CudaBackend::Device* CudaBackend::least_loaded() {
  // Fewest jobs running or queued; among equals, the fewest bytes in use (resident matrices
  // included), so that uploads, which run no job, spread over the devices too.
  Device* best = nullptr;
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

absl::Status CudaBackend::check_result_device(const ResidentMatrix* out, const Device& d) {
  if (out == nullptr || out->device == d.index) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("output_shm: the result's CUDA memory is on ", out->device_label,
                   ", the operation runs on ", d.label, " (keep operands and result on one GPU)"));
}

absl::StatusOr<CudaBackend::Device*> CudaBackend::pick(
    std::initializer_list<const Operand*> operands) {
  return pick(std::span<const Operand* const>(operands.begin(), operands.size()));
}

absl::StatusOr<CudaBackend::Device*> CudaBackend::pick(std::span<const Operand* const> operands) {
  Device* chosen = nullptr;
  for (const Operand* o : operands) {
    if (o == nullptr || !o->is_resident()) continue;
    Device* d = devices_[static_cast<std::size_t>(o->resident->device)].get();
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

absl::Status CudaBackend::multiply(const GemmJob& job, const GemmChooser& choose,
                                   std::span<std::byte> out, const Waiter& waiter,
                                   Outcome& outcome) {
  const absl::Time queued = absl::Now();
  StageMarks& marks = outcome.marks;
  absl::StatusOr<Device*> picked = pick({&job.a, &job.b, job.c ? &*job.c : nullptr});
  if (!picked.ok()) return picked.status();
  marks.mark("pick");
  Device& d = **picked;
  if (absl::Status s = check_result_device(job.device_out.get(), d); !s.ok()) return s;
  const kernels::DType operand = kernels::kernel_operand_dtype(job.a.dtype, job.precision);
  const bool convert = operand != job.a.dtype;
  // The device memory this request needs, all admitted at once.
  std::vector<BlockSpec> specs;
  const auto add = [&specs](std::size_t bytes, bool long_lived = false) {
    specs.push_back({bytes, long_lived});
    return specs.size() - 1;
  };
  const std::size_t na = static_cast<std::size_t>(job.a.rows * job.a.cols);
  const std::size_t nb = static_cast<std::size_t>(job.b.rows * job.b.cols);
  const std::size_t ia = job.a.is_resident() ? SIZE_MAX : add(job.a.bytes());
  const std::size_t ib = job.b.is_resident() ? SIZE_MAX : add(job.b.bytes());
  const std::size_t io = add(job.out_bytes(), job.keep_result);
  const std::size_t ica = convert ? add(na * kernels::dtype_size(operand)) : SIZE_MAX;
  const std::size_t icb = convert ? add(nb * kernels::dtype_size(operand)) : SIZE_MAX;
  absl::StatusOr<DeviceScheduler::Admission> adm = d.scheduler->admit(specs, waiter);
  if (!adm.ok()) return adm.status();
  outcome.times.queue_us = micros_since(queued);
  marks.mark("admit");
  if (absl::Status s = cuda_status(cudaSetDevice(d.ordinal), "cudaSetDevice"); !s.ok()) return s;
  StreamSlot& slot = d.slots[static_cast<std::size_t>(adm->slot())];
  cudaStream_t s = slot.resources.stream();
  absl::Cleanup drain = [s] { cudaStreamSynchronize(s); };  // before the blocks are returned

  void* a = ia == SIZE_MAX ? job.a.resident->block.data() : adm->block(ia).data();
  void* b = ib == SIZE_MAX ? job.b.resident->block.data() : adm->block(ib).data();
  void* c = adm->block(io).data();
  void* ka = convert ? adm->block(ica).data() : a;  // what the kernel reads
  void* kb = convert ? adm->block(icb).data() : b;
  // The variant is chosen on the exact problem before any device work, so its host-side cost is
  // not timed as part of a stage.
  const kernels::GemmProblem p = gemm_problem(job, operand, ka, kb, c);
  absl::StatusOr<const kernels::GemmVariant*> v = choose(p);
  if (!v.ok()) return v.status();
  marks.mark("choose");

  // Operands already on the device (resident, no C to copy) skip the first event: one CUDA call
  // less on the path that matters most for latency.
  const bool copy_c = job.c.has_value() && job.beta != 0.0;
  const bool stages = ia != SIZE_MAX || ib != SIZE_MAX || copy_c;
  if (stages) cudaEventRecord(slot.events[0].get(), s);
  // Every inline operand in one staged transfer, so B's host copy overlaps A's DMA.
  StagedCopy inline_copies[3];
  std::size_t n_inline = 0;
  if (ia != SIZE_MAX) inline_copies[n_inline++] = {a, job.a.data.data(), job.a.bytes()};
  if (ib != SIZE_MAX) inline_copies[n_inline++] = {b, job.b.data.data(), job.b.bytes()};
  if (copy_c) {
    if (job.c->is_resident()) {
      if (absl::Status st =
              cuda_status(cudaMemcpyAsync(c, job.c->resident->block.data(), job.out_bytes(),
                                          cudaMemcpyDeviceToDevice, s),
                          "copy C");
          !st.ok()) {
        return st;
      }
    } else {
      inline_copies[n_inline++] = {c, job.c->data.data(), job.out_bytes()};
    }
  }
  if (n_inline > 0) {
    if (absl::Status st = slot.staging.to_device({inline_copies, n_inline}, s, *copier_);
        !st.ok()) {
      return st;
    }
  }
  if (stages) cudaEventRecord(slot.events[3].get(), s);
  marks.mark("stage_in");
  // Events 1 and 2 bracket the device work (conversions, the kernels); the host's time to enqueue
  // it is the launch stage. Replayed as a graph, events included, the device runs the work without
  // waiting for the host in between; launched directly, it may wait within that interval
  // (docs/api.md).
  const auto enqueue = [&]() -> absl::Status {
    if (absl::Status st = kernels::LaunchGraphs::record_event(slot.events[1].get(), s); !st.ok()) {
      return st;
    }
    if (convert) {
      if (absl::Status st = cuda_status(kernels::launch_convert(a, job.a.dtype, ka, operand,
                                                                static_cast<std::int64_t>(na), s),
                                        "convert A");
          !st.ok()) {
        return st;
      }
      if (absl::Status st = cuda_status(kernels::launch_convert(b, job.b.dtype, kb, operand,
                                                                static_cast<std::int64_t>(nb), s),
                                        "convert B");
          !st.ok()) {
        return st;
      }
    }
    if (absl::Status st = (*v)->launch(p, slot.resources.context()); !st.ok()) return st;
    return kernels::LaunchGraphs::record_event(slot.events[2].get(), s);
  };
  kernels::LaunchKey key;
  key.add((*v)->name).add(p).add(convert);
  if (convert) key.add(a).add(b).add(job.a.dtype).add(job.b.dtype).add(na).add(nb);
  if (absl::Status st =
          enqueue_device_work(slot.graphs, key, (*v)->capturable, s, enqueue, outcome);
      !st.ok()) {
    (void)finish(s, d.healthy);
    return st;
  }
  marks.mark("launch");
  if (absl::Status st = cuda_status(cudaEventSynchronize(slot.events[2].get()), "kernel");
      !st.ok()) {
    return finish(s, d.healthy);
  }
  marks.mark("kernel_wait");
  const absl::Time copy_out = absl::Now();
  if (job.device_out != nullptr) {
    if (absl::Status st = cuda_status(cudaMemcpyAsync(job.device_out->block.data(), c,
                                                      job.out_bytes(), cudaMemcpyDeviceToDevice, s),
                                      "result to CUDA memory");
        !st.ok()) {
      return st;
    }
  } else if (!job.keep_result) {
    if (absl::Status st = slot.staging.to_host(out.data(), c, out.size(), s, *copier_); !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = finish(s, d.healthy); !st.ok()) return st;
  std::move(drain).Cancel();  // finish() synchronized the stream
  marks.mark("stage_out");
  outcome.times.device_to_host_us = job.keep_result ? 0.0 : micros_since(copy_out);
  outcome.times.host_to_device_us =
      stages ? elapsed_us(slot.events[0].get(), slot.events[3].get()) : 0.0;
  outcome.times.kernel_us = elapsed_us(slot.events[1].get(), slot.events[2].get());
  marks.add("gpu_h2d(events)", outcome.times.host_to_device_us);
  marks.add("gpu_kernel(events)", outcome.times.kernel_us);
  outcome.variant = std::string((*v)->name);
  outcome.device = d.display_name;
  outcome.work = kernels::gemm_flops(p);
  if (job.keep_result) {
    outcome.result = make_resident(adm->take_block(io), job.m(), job.n(), job.out_dtype,
                                   job.out_layout, job.owner, d.index, d.label);
  }
  marks.mark("outcome");
  return absl::OkStatus();
}

absl::Status CudaBackend::multiply_batch(const GemmBatchJob& job, const GemmChooser& choose,
                                         const Waiter& waiter, Outcome& outcome) {
  const absl::Time queued = absl::Now();
  const GemmJob& shape = job.shape;
  std::vector<const Operand*> operands;
  for (const std::vector<Operand>* list : {&job.a, &job.b, &job.c}) {
    for (const Operand& o : *list) operands.push_back(&o);
  }
  absl::StatusOr<Device*> picked = pick(operands);
  if (!picked.ok()) return picked.status();
  Device& d = **picked;
  const kernels::DType operand = kernels::kernel_operand_dtype(shape.a.dtype, shape.precision);
  const bool convert = operand != shape.a.dtype;
  const std::size_t out_bytes = shape.out_bytes();
  const auto count = static_cast<std::size_t>(job.count);
  // Device memory, admitted at once: each operand's inline matrices stacked in order, the results
  // (one block for the batch, or one resident block per product), the converted operands, and
  // room for pointer arrays.
  const auto inline_bytes = [](const std::vector<Operand>& list) {
    std::size_t n = 0;
    for (const Operand& o : list) n += o.is_resident() ? 0 : o.bytes();
    return n;
  };
  std::vector<BlockSpec> specs;
  const auto add = [&specs](std::size_t bytes, bool long_lived = false) {
    specs.push_back({std::max<std::size_t>(bytes, 1), long_lived});
    return specs.size() - 1;
  };
  const std::size_t ia = add(inline_bytes(job.a));
  const std::size_t ib = add(inline_bytes(job.b));
  const std::size_t io = shape.keep_result ? specs.size() : add(count * out_bytes);
  if (shape.keep_result) {
    for (std::size_t i = 0; i < count; ++i) add(out_bytes, true);
  }
  const std::size_t na = static_cast<std::size_t>(shape.a.rows * shape.a.cols);
  const std::size_t nb = static_cast<std::size_t>(shape.b.rows * shape.b.cols);
  const std::size_t op_size = kernels::dtype_size(operand);
  const std::size_t ica = convert ? add(job.a.size() * na * op_size) : SIZE_MAX;
  const std::size_t icb = convert ? add(job.b.size() * nb * op_size) : SIZE_MAX;
  // Pointer arrays only where the matrices are not evenly spaced: separate result blocks, or
  // resident matrices (inline stacks, converted stacks and one result block always are).
  const auto resident_list = [](const std::vector<Operand>& list) {
    return list.size() > 1 && list[0].is_resident();
  };
  const bool need_arrays =
      count > 1 && (shape.keep_result || resident_list(job.a) || resident_list(job.b));
  const std::size_t iarr = need_arrays ? add(3 * count * sizeof(void*)) : SIZE_MAX;
  absl::StatusOr<DeviceScheduler::Admission> adm = d.scheduler->admit(specs, waiter);
  if (!adm.ok()) return adm.status();
  outcome.times.queue_us = micros_since(queued);
  if (absl::Status s = cuda_status(cudaSetDevice(d.ordinal), "cudaSetDevice"); !s.ok()) return s;
  StreamSlot& slot = d.slots[static_cast<std::size_t>(adm->slot())];
  cudaStream_t s = slot.resources.stream();
  absl::Cleanup drain = [s] { cudaStreamSynchronize(s); };  // before the blocks are returned

  // Where each matrix is on the device, and the host -> device copies that put the inline ones
  // there (consecutive host matrices going to consecutive places merge into one copy).
  std::vector<StagedCopy> copies;
  const auto stage = [&copies](void* dst, const void* src, std::size_t n) {
    if (!copies.empty()) {
      StagedCopy& last = copies.back();
      if (static_cast<const std::byte*>(last.src) + last.bytes == src &&
          static_cast<std::byte*>(last.dst) + last.bytes == dst) {
        last.bytes += n;
        return;
      }
    }
    copies.push_back({dst, src, n});
  };
  const auto place = [&](const std::vector<Operand>& list, std::size_t block) {
    std::vector<const void*> where;
    auto* next = static_cast<std::byte*>(adm->block(block).data());
    for (const Operand& o : list) {
      if (o.is_resident()) {
        where.push_back(o.resident->block.data());
      } else {
        stage(next, o.data.data(), o.bytes());
        where.push_back(next);
        next += o.bytes();
      }
    }
    return where;
  };
  const std::vector<const void*> a_where = place(job.a, ia);
  const std::vector<const void*> b_where = place(job.b, ib);
  ProductPointers ptrs;
  ptrs.a = a_where;
  ptrs.b = b_where;
  if (convert) {  // the kernel reads the converted stacks, one matrix after another
    ptrs.a.clear();
    ptrs.b.clear();
    for (std::size_t i = 0; i < job.a.size(); ++i) {
      ptrs.a.push_back(static_cast<std::byte*>(adm->block(ica).data()) + i * na * op_size);
    }
    for (std::size_t i = 0; i < job.b.size(); ++i) {
      ptrs.b.push_back(static_cast<std::byte*>(adm->block(icb).data()) + i * nb * op_size);
    }
  }
  std::vector<std::pair<void*, const void*>> resident_c;  // device-to-device copies of C
  for (std::size_t i = 0; i < count; ++i) {
    void* c = shape.keep_result ? adm->block(io + i).data()
                                : static_cast<std::byte*>(adm->block(io).data()) + i * out_bytes;
    ptrs.c.push_back(c);
    const Operand* c0 = job.c_of(static_cast<std::int64_t>(i));
    if (c0 == nullptr || shape.beta == 0.0) continue;
    if (c0->is_resident()) {
      resident_c.emplace_back(c, c0->resident->block.data());
    } else {
      stage(c, c0->data.data(), out_bytes);
    }
  }
  const std::optional<kernels::GemmBatch> strided =
      strided_batch(ptrs, op_size, kernels::dtype_size(shape.out_dtype));
  PointerArrays arrays;
  if (!strided.has_value()) {
    if (iarr == SIZE_MAX) return absl::InternalError("batch: matrices not evenly spaced");
    arrays = pointer_arrays(ptrs);
    stage(adm->block(iarr).data(), arrays.host.data(), arrays.host.size() * sizeof(void*));
  }
  const kernels::GemmBatch batch =
      strided.has_value() ? *strided : arrays.placed_at(adm->block(iarr).data());
  const kernels::GemmProblem p =
      gemm_problem(shape, operand, ptrs.a[0], ptrs.b[0], ptrs.c[0], batch);
  absl::StatusOr<const kernels::GemmVariant*> v = choose(p);
  if (!v.ok()) return v.status();

  cudaEventRecord(slot.events[0].get(), s);
  for (const auto& [dst, src] : resident_c) {
    if (absl::Status st = cuda_status(
            cudaMemcpyAsync(dst, src, out_bytes, cudaMemcpyDeviceToDevice, s), "copy C");
        !st.ok()) {
      return st;
    }
  }
  if (!copies.empty()) {
    if (absl::Status st = slot.staging.to_device(copies, s, *copier_); !st.ok()) return st;
  }
  cudaEventRecord(slot.events[3].get(), s);
  // Launched directly: batches vary in size and place, so a captured graph would rarely be
  // replayed.
  const absl::Time launch = absl::Now();
  const auto enqueue = [&]() -> absl::Status {
    cudaEventRecord(slot.events[1].get(), s);
    if (convert) {
      const auto convert_all = [&](const std::vector<Operand>& list,
                                   const std::vector<const void*>& from,
                                   const std::vector<const void*>& to, std::size_t elems,
                                   const char* what) -> absl::Status {
        for (std::size_t i = 0; i < list.size(); ++i) {
          if (absl::Status st = cuda_status(
                  kernels::launch_convert(from[i], list[i].dtype, const_cast<void*>(to[i]), operand,
                                          static_cast<std::int64_t>(elems), s),
                  what);
              !st.ok()) {
            return st;
          }
        }
        return absl::OkStatus();
      };
      if (absl::Status st = convert_all(job.a, a_where, ptrs.a, na, "convert A"); !st.ok()) {
        return st;
      }
      if (absl::Status st = convert_all(job.b, b_where, ptrs.b, nb, "convert B"); !st.ok()) {
        return st;
      }
    }
    if (absl::Status st = (*v)->launch(p, slot.resources.context()); !st.ok()) return st;
    cudaEventRecord(slot.events[2].get(), s);
    return absl::OkStatus();
  };
  if (absl::Status st = enqueue(); !st.ok()) {
    (void)finish(s, d.healthy);
    return st;
  }
  outcome.times.launch_us = micros_since(launch);
  outcome.launch_path = "direct";
  if (absl::Status st = cuda_status(cudaEventSynchronize(slot.events[2].get()), "kernel");
      !st.ok()) {
    return finish(s, d.healthy);
  }
  const absl::Time copy_out = absl::Now();
  if (!shape.keep_result) {
    if (job.outs.size() == 1) {  // the whole batch to one place
      if (absl::Status st = slot.staging.to_host(job.outs[0].data(), adm->block(io).data(),
                                                 count * out_bytes, s, *copier_);
          !st.ok()) {
        return st;
      }
    } else {
      for (std::size_t i = 0; i < count; ++i) {
        if (absl::Status st =
                slot.staging.to_host(job.outs[i].data(), ptrs.c[i], out_bytes, s, *copier_);
            !st.ok()) {
          return st;
        }
      }
    }
  }
  if (absl::Status st = finish(s, d.healthy); !st.ok()) return st;
  std::move(drain).Cancel();  // finish() synchronized the stream
  outcome.times.device_to_host_us = shape.keep_result ? 0.0 : micros_since(copy_out);
  outcome.times.host_to_device_us = elapsed_us(slot.events[0].get(), slot.events[3].get());
  outcome.times.kernel_us = elapsed_us(slot.events[1].get(), slot.events[2].get());
  outcome.variant = std::string((*v)->name);
  outcome.device = d.display_name;
  outcome.work = kernels::gemm_flops(p);
  if (shape.keep_result) {
    for (std::size_t i = 0; i < count; ++i) {
      outcome.results.push_back(make_resident(adm->take_block(io + i), shape.m(), shape.n(),
                                              shape.out_dtype, shape.out_layout, shape.owner,
                                              d.index, d.label));
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::transpose(const TransposeJob& job, const TransposeChooser& choose,
                                    std::span<std::byte> out, const Waiter& waiter,
                                    Outcome& outcome) {
  const absl::Time queued = absl::Now();
  absl::StatusOr<Device*> picked = pick({&job.a});
  if (!picked.ok()) return picked.status();
  Device& d = **picked;
  if (absl::Status s = check_result_device(job.device_out.get(), d); !s.ok()) return s;
  std::vector<BlockSpec> specs;
  const bool inline_a = !job.a.is_resident();
  if (inline_a) specs.push_back({job.a.bytes(), false});
  if (!job.in_place) specs.push_back({job.out_bytes(), job.keep_result});
  const std::size_t io = specs.size() - 1;
  absl::StatusOr<DeviceScheduler::Admission> adm = d.scheduler->admit(specs, waiter);
  if (!adm.ok()) return adm.status();
  outcome.times.queue_us = micros_since(queued);
  if (absl::Status s = cuda_status(cudaSetDevice(d.ordinal), "cudaSetDevice"); !s.ok()) return s;
  StreamSlot& slot = d.slots[static_cast<std::size_t>(adm->slot())];
  cudaStream_t s = slot.resources.stream();
  // Declared before `drain`, so freed only after the stream is idle.
  MemoryPool::Block scratch;
  MemoryPool::Block swapped;  // in place by swap: the transpose's block, then A's old one
  absl::Cleanup drain = [s] { cudaStreamSynchronize(s); };

  void* in = inline_a ? adm->block(0).data() : job.a.resident->block.data();
  void* dst = job.in_place ? in : adm->block(io).data();
  kernels::TransposeProblem p = transpose_problem(job, in, dst);
  absl::StatusOr<const kernels::TransposeVariant*> v = choose(p);
  if (job.in_place && (job.a.rows != job.a.cols || !v.ok())) {
    // A rectangular matrix transposed within its own memory moves each byte about twice (the
    // staged sweep reaches half of copy bandwidth). With room in the budget for a second copy,
    // "in place" is done as a user sees it: transposed out of place into a new block, which then
    // replaces the matrix's block under the exclusive lock the job holds. Not when the request
    // names an in-place variant (it refuses the out-of-place problem).
    if (absl::StatusOr<MemoryPool::Block> b = d.pool->allocate(job.out_bytes(), true); b.ok()) {
      const kernels::TransposeProblem q = transpose_problem(job, in, b->data());
      if (absl::StatusOr<const kernels::TransposeVariant*> w = choose(q); w.ok()) {
        swapped = *std::move(b);
        dst = swapped.data();
        p = q;
        v = w;
      }
    }
  }
  if (!v.ok()) return v.status();
  kernels::ExecContext context = slot.resources.context();
  if ((*v)->preferred_workspace_bytes != nullptr) {
    // E.g. the in-place rectangular sweep, best with about half the matrix as scratch: lent from
    // the pool when the budget has room, else the variant makes do with the stream's workspace.
    const std::size_t want = (*v)->preferred_workspace_bytes(p);
    if (want > context.workspace_bytes) {
      if (absl::StatusOr<MemoryPool::Block> b = d.pool->allocate(want); b.ok()) {
        scratch = *std::move(b);
        context.workspace = scratch.data();
        context.workspace_bytes = scratch.size();
      }
    }
  }

  if (inline_a) {
    cudaEventRecord(slot.events[0].get(), s);
    if (absl::Status st = slot.staging.to_device(in, job.a.data.data(), job.a.bytes(), s, *copier_);
        !st.ok()) {
      return st;
    }
    cudaEventRecord(slot.events[3].get(), s);
  }
  const auto enqueue = [&]() -> absl::Status {
    if (absl::Status st = kernels::LaunchGraphs::record_event(slot.events[1].get(), s); !st.ok()) {
      return st;
    }
    if (absl::Status st = (*v)->launch(p, context); !st.ok()) return st;
    return kernels::LaunchGraphs::record_event(slot.events[2].get(), s);
  };
  kernels::LaunchKey key;
  key.add((*v)->name).add(p).add(context.workspace).add(context.workspace_bytes);
  if (absl::Status st = enqueue_device_work(slot.graphs, key, true, s, enqueue, outcome);
      !st.ok()) {
    (void)finish(s, d.healthy);
    return st;
  }
  if (absl::Status st = cuda_status(cudaEventSynchronize(slot.events[2].get()), "kernel");
      !st.ok()) {
    return finish(s, d.healthy);
  }
  const absl::Time copy_out = absl::Now();
  const bool to_host = !job.keep_result && !job.in_place;
  if (job.device_out != nullptr) {
    if (absl::Status st = cuda_status(cudaMemcpyAsync(job.device_out->block.data(), dst,
                                                      job.out_bytes(), cudaMemcpyDeviceToDevice, s),
                                      "result to CUDA memory");
        !st.ok()) {
      return st;
    }
  } else if (to_host) {
    if (absl::Status st = slot.staging.to_host(out.data(), dst, out.size(), s, *copier_);
        !st.ok()) {
      return st;
    }
  }
  if (absl::Status st = finish(s, d.healthy); !st.ok()) return st;
  std::move(drain).Cancel();                       // finish() synchronized the stream
  outcome.replacement_block = std::move(swapped);  // the runtime swaps it in (resident store)
  outcome.times.device_to_host_us = to_host ? micros_since(copy_out) : 0.0;
  outcome.times.host_to_device_us =
      inline_a ? elapsed_us(slot.events[0].get(), slot.events[3].get()) : 0.0;
  outcome.times.kernel_us = elapsed_us(slot.events[1].get(), slot.events[2].get());
  outcome.variant = std::string((*v)->name);
  outcome.device = d.display_name;
  outcome.work = kernels::transpose_bytes(p);
  if (job.keep_result && !job.in_place) {
    outcome.result = make_resident(adm->take_block(io), job.a.cols, job.a.rows, job.a.dtype,
                                   job.a.layout, job.owner, d.index, d.label);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> CudaBackend::create_resident(
    std::int64_t rows, std::int64_t cols, kernels::DType dtype, kernels::Layout layout, int device,
    const Waiter& /*waiter*/) {
  Device* d = device >= 0 && device < static_cast<int>(devices_.size())
                  ? devices_[static_cast<std::size_t>(device)].get()
                  : least_loaded();
  if (d == nullptr || !d->healthy.load()) {
    return absl::UnavailableError("the CUDA device is unhealthy after a device error");
  }
  const auto bytes = static_cast<std::size_t>(rows * cols) * kernels::dtype_size(dtype);
  absl::StatusOr<MemoryPool::Block> block = d->pool->allocate(bytes, /*long_lived=*/true);
  if (!block.ok()) return block.status();
  return make_resident(*std::move(block), rows, cols, dtype, layout, "", d->index, d->label);
}

absl::Status CudaBackend::write_resident(ResidentMatrix& m, std::size_t offset,
                                         std::span<const std::byte> bytes, const Waiter& waiter) {
  Device& d = *devices_[static_cast<std::size_t>(m.device)];
  absl::StatusOr<DeviceScheduler::Admission> adm = d.scheduler->admit({}, waiter);
  if (!adm.ok()) return adm.status();
  if (absl::Status s = cuda_status(cudaSetDevice(d.ordinal), "cudaSetDevice"); !s.ok()) return s;
  StreamSlot& slot = d.slots[static_cast<std::size_t>(adm->slot())];
  cudaStream_t s = slot.resources.stream();
  absl::Status st = slot.staging.to_device(static_cast<std::byte*>(m.block.data()) + offset,
                                           bytes.data(), bytes.size(), s, *copier_);
  absl::Status done = finish(s, d.healthy);
  return st.ok() ? done : st;
}

absl::Status CudaBackend::read_resident(ResidentMatrix& m, std::size_t offset,
                                        std::span<std::byte> out, const Waiter& waiter) {
  Device& d = *devices_[static_cast<std::size_t>(m.device)];
  absl::StatusOr<DeviceScheduler::Admission> adm = d.scheduler->admit({}, waiter);
  if (!adm.ok()) return adm.status();
  if (absl::Status s = cuda_status(cudaSetDevice(d.ordinal), "cudaSetDevice"); !s.ok()) return s;
  StreamSlot& slot = d.slots[static_cast<std::size_t>(adm->slot())];
  cudaStream_t s = slot.resources.stream();
  absl::Status st = slot.staging.to_host(
      out.data(), static_cast<const std::byte*>(m.block.data()) + offset, out.size(), s, *copier_);
  absl::Status done = finish(s, d.healthy);
  return st.ok() ? done : st;
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
