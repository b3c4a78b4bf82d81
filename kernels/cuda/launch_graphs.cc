// LaunchGraphs: capture once per key, replay after; see launch_graphs.h.
#include "kernels/cuda/launch_graphs.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace matserve::kernels {
namespace {

// With MATSERVE_GRAPH_DOT_DIR set, each captured graph is written there as Graphviz DOT (every
// node with its kind and parameters): what a replay runs on the device, node by node.
void write_dot(cudaGraph_t graph) {
  static const char* dir = std::getenv("MATSERVE_GRAPH_DOT_DIR");
  if (dir == nullptr) return;
  const std::string path = std::string(dir) + "/graph-" +
                           std::to_string(reinterpret_cast<std::uintptr_t>(graph)) + ".dot";
  (void)cudaGraphDebugDotPrint(graph, path.c_str(), cudaGraphDebugDotFlagsVerbose);
}

}  // namespace

LaunchKey& LaunchKey::add(const GemmProblem& p) {
  add(p.m).add(p.n).add(p.k);
  add(p.a).add(p.lda).add(p.a_trans);
  add(p.b).add(p.ldb).add(p.b_trans);
  add(p.c).add(p.ldc);
  add(p.in_type).add(p.out_type).add(p.precision);
  add(p.alpha).add(p.beta).add(p.fp8_scales_out);
  // A batch: its count and strides, or where its pointer arrays are (their contents are staged
  // on the device before each launch and read by the kernels, so a replay reads the new ones).
  const GemmBatch& batch = p.batch;
  add(batch.count).add(batch.stride_a).add(batch.stride_b).add(batch.stride_c);
  add(batch.a_array).add(batch.b_array).add(batch.c_array).add(batch.arrays_aligned16);
  // Where a variant may run the batch product by product from the host's copy of the arrays
  // (fp8), each product's pointers are in its captured launches: the pointers themselves too.
  if (batch.host_a_array != nullptr && p.precision == Precision::kF8) {
    for (std::int64_t z = 0; z < batch.count; ++z) {
      add(batch.host_a_array[z]).add(batch.host_b_array[z]).add(batch.host_c_array[z]);
    }
  }
  return *this;
}

LaunchKey& LaunchKey::add(const TransposeProblem& p) {
  add(p.rows).add(p.cols);
  add(p.in).add(p.ld_in);
  add(p.out).add(p.ld_out);
  return add(p.dtype).add(p.scale);
}

absl::StatusOr<LaunchGraphs::Prepared> LaunchGraphs::prepare(
    const LaunchKey& key, cudaStream_t stream, absl::FunctionRef<absl::Status()> enqueue) {
  if (capacity_ == 0) return Prepared{};
  Entry* entry = nullptr;
  if (auto it = entries_.find(key.bytes()); it != entries_.end()) {
    lru_.splice(lru_.begin(), lru_, it->second);
    entry = &*it->second;
  } else {
    entry = &insert(key.bytes());
  }
  if (entry->exec) {
    ++stats_.replays;
    return Prepared{entry->exec.get(), false};
  }
  if (entry->uncapturable || ++entry->sightings < capture_on_sighting_) return Prepared{};
  // Thread-local: other threads' CUDA calls (copies, allocations) stay legal while this stream
  // records; this thread's own unsafe calls invalidate the capture, and the code runs directly.
  if (absl::Status s = cuda_status(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                                   "begin capture");
      !s.ok()) {
    return s;
  }
  const absl::Status enqueued = enqueue();
  cudaGraph_t raw = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &raw);
  Graph graph(raw);
  if (!enqueued.ok() || ended != cudaSuccess || !graph) {
    cudaGetLastError();  // a failed capture's error is not sticky; the direct run reports its own
    ++stats_.uncapturable;
    entry->uncapturable = true;
    return Prepared{};
  }
  write_dot(graph.get());
  cudaGraphExec_t exec = nullptr;
  if (absl::Status s = cuda_status(cudaGraphInstantiate(&exec, graph.get(), 0), "instantiate");
      !s.ok()) {
    return s;
  }
  GraphExec owned(exec);
  // Uploads the graph's work descriptors now, so its first launch costs what a replay costs.
  if (absl::Status s = cuda_status(cudaGraphUpload(exec, stream), "upload graph"); !s.ok()) {
    return s;
  }
  ++stats_.captures;
  entry->exec = std::move(owned);
  return Prepared{exec, true};
}

absl::Status LaunchGraphs::launch(cudaGraphExec_t exec, cudaStream_t stream) {
  return cuda_status(cudaGraphLaunch(exec, stream), "graph launch");
}

absl::Status LaunchGraphs::record_event(cudaEvent_t event, cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (absl::Status s = cuda_status(cudaStreamIsCapturing(stream, &capturing), "capture status");
      !s.ok()) {
    return s;
  }
  // cudaEventRecordExternal is only legal under capture.
  return cuda_status(
      cudaEventRecordWithFlags(event, stream,
                               capturing == cudaStreamCaptureStatusActive ? cudaEventRecordExternal
                                                                          : cudaEventRecordDefault),
      "record event");
}

LaunchGraphs::Entry& LaunchGraphs::insert(std::string key) {
  if (entries_.size() >= capacity_) {
    entries_.erase(lru_.back().key);
    lru_.pop_back();  // the graph is destroyed once the work already enqueued from it is done
    ++stats_.evictions;
  }
  lru_.push_front(Entry{std::move(key)});
  entries_.emplace(lru_.front().key, lru_.begin());
  return lru_.front();
}

}  // namespace matserve::kernels
