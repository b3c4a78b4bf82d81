// Replays a call's device work as a CUDA graph. A kernel launch costs the host a few microseconds;
// a cuBLAS or cuBLASLt call costs it tens (argument checks, the heuristic, plan lookup, several
// driver calls), and a GPU that is idle when the call starts waits for all of it. The first call
// with a given key runs the launch code under stream capture (nothing executes) and instantiates
// the graph; every later call with the same key is one cudaGraphLaunch. The key holds everything
// the launch code reads (problem, pointers, scalars, variant, workspace), so a replay enqueues
// exactly what the launch code would have. One cache per stream; not thread-safe (the owner of
// the stream uses it); bounded, least recently used out first.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kernels/cuda/resources.h"
#include "kernels/gemm_problem.h"
#include "kernels/transpose_problem.h"

namespace matserve::kernels {

namespace detail {
inline void destroy_graph(cudaGraph_t g) {
  cudaGraphDestroy(g);
}
inline void destroy_graph_exec(cudaGraphExec_t g) {
  cudaGraphExecDestroy(g);
}
}  // namespace detail
using Graph = CudaOwned<cudaGraph_t, &detail::destroy_graph>;
using GraphExec = CudaOwned<cudaGraphExec_t, &detail::destroy_graph_exec>;

// Bytes that identify a launch: each field appended in turn (no struct padding in the key).
class LaunchKey {
 public:
  // One allocation per request: a GEMM's key (variant name, problem, conversions) fits.
  LaunchKey() { bytes_.reserve(192); }
  template <typename T>
  LaunchKey& add(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  LaunchKey& add(std::string_view s) {
    add(s.size());
    bytes_.append(s.data(), s.size());
    return *this;
  }
  LaunchKey& add(const GemmProblem& p);
  LaunchKey& add(const TransposeProblem& p);
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

class LaunchGraphs {
 public:
  struct Stats {
    std::int64_t replays = 0;       // launches of a cached graph
    std::int64_t captures = 0;      // graphs captured and instantiated
    std::int64_t uncapturable = 0;  // keys whose launch code cannot run under capture
    std::int64_t evictions = 0;
  };
  // What prepare() found: a graph to launch, or nothing (run the launch code directly).
  struct Prepared {
    cudaGraphExec_t exec = nullptr;
    bool captured_now = false;
  };

  // capture_on_sighting: the sighting of a key on which it is captured; earlier ones run directly.
  // 2 (the server's choice) keeps launches that never repeat (a chain of keep_result calls, each
  // writing a new block) at the cost of a direct launch, without a capture each.
  explicit LaunchGraphs(std::size_t capacity = 64, int capture_on_sighting = 1)
      : capacity_(capacity), capture_on_sighting_(capture_on_sighting) {}

  // The instantiated graph of what `enqueue` puts on `stream` for `key`: cached, or captured now
  // (`enqueue` runs under thread-local stream capture, so nothing executes). exec is null when the
  // launch code cannot be captured or failed under capture; the caller then runs it directly,
  // which reports its real error. An error only when CUDA failed outside the launch code.
  absl::StatusOr<Prepared> prepare(const LaunchKey& key, cudaStream_t stream,
                                   absl::FunctionRef<absl::Status()> enqueue);
  // Enqueues a prepared graph on `stream`.
  static absl::Status launch(cudaGraphExec_t exec, cudaStream_t stream);
  // Records `event` on `stream` from launch code: as a node of the graph while the stream is
  // being captured (so a replay records it too), as a plain record otherwise.
  static absl::Status record_event(cudaEvent_t event, cudaStream_t stream);

  const Stats& stats() const { return stats_; }
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    std::string key;
    GraphExec exec;  // null: not captured yet, or uncapturable (run directly)
    int sightings = 0;
    bool uncapturable = false;
  };
  Entry& insert(std::string key);

  std::size_t capacity_;
  int capture_on_sighting_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string_view, std::list<Entry>::iterator> entries_;
  Stats stats_;
};

}  // namespace matserve::kernels
