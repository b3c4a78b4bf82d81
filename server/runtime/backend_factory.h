// Creates the backend the flags ask for: "cuda", "cpu", or "auto" (CUDA when this build has it and
// a device is visible, else the CPU).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/runtime/backend.h"
#include "server/runtime/host_limits.h"
#include "server/runtime/split_plan.h"

namespace matserve::server {

struct BackendOptions {
  std::string backend = "auto";  // auto | cuda | cpu
  std::vector<int> devices;      // CUDA ordinals; empty = all
  int streams_per_device = 4;
  int cpu_concurrency = 2;
  std::int64_t memory_budget_bytes = 0;  // per device; 0 = 90% of a GPU, a quarter of host memory
  int max_queue = 256;                   // waiting requests per device
  int copy_threads = 6;  // CUDA: helpers for host copies into and out of pinned staging
  std::size_t pinned_message_bytes = 0;    // CUDA: pinned heap for large message buffers
  int launch_graphs_per_stream = 64;       // CUDA: replayed launches cached per stream; 0 = off
  bool gate_launches = false;              // CUDA: streams wait for each call's whole enqueue
  SplitSettings split;                     // CUDA: one product over several devices
  std::int64_t max_host_matrix_bytes = 0;  // CUDA: pinned host memory for too-large matrices
  std::int64_t out_of_core_tile = 8192;    // CUDA: largest tile of an out-of-core product
  std::optional<HostLimits> host;          // the process's CPU and memory limits; unset: read them
};

absl::StatusOr<std::unique_ptr<Backend>> make_backend(const BackendOptions& options);

}  // namespace matserve::server
