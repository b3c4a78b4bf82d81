// Request limits the service enforces before it allocates anything for a request; each comes from
// a server flag and is reported by GetServerInfo.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace matserve::server {

struct ServiceLimits {
  std::int64_t max_message_bytes = std::int64_t{1} << 30;  // --max_message_bytes
  std::int64_t max_dimension = 65536;                      // --max_dimension
  std::int64_t max_matrix_bytes = std::int64_t{16} << 30;  // --max_matrix_bytes
  std::int64_t max_resident_bytes_per_owner = 0;           // 0: only the device budget
  // `verify`: the float64 reference runs on the server's CPU. A GEMM whose 2*m*n*k exceeds
  // max_verify_flops, or any job whose reference needs more host memory than max_verify_bytes,
  // is refused; all references at once hold at most max_verify_bytes (others wait).
  double max_verify_flops = 2.0 * 4096 * 4096 * 4096;     // --max_verify_flops
  std::int64_t max_verify_bytes = std::int64_t{1} << 30;  // --max_verify_bytes
  // UploadStream/DownloadStream calls that move no chunk for this long are cancelled (0: never).
  std::int64_t stream_idle_timeout_seconds = 60;  // --stream_idle_timeout_seconds
  // Shared-memory regions (RegisterSharedMemory) accepted at all, and per caller at most.
  bool shared_memory = true;  // --shared_memory
  // Objects owned by users other than the server's own accepted (--shared_memory_allow_other_uids).
  bool shared_memory_allow_other_uids = false;
  int max_shm_regions_per_owner = 64;  // --max_shm_regions_per_owner
  // Bytes of host regions registered at once, per caller and in all (the server maps them all).
  std::int64_t max_shared_memory_bytes_per_owner = std::int64_t{64} << 30;
  std::int64_t max_shared_memory_bytes = std::int64_t{256} << 30;
  std::int64_t max_batch_products = 65536;  // --max_batch_products: products per MultiplyBatched
  // Dynamic batching of concurrent Multiply requests (off at 0 or 1).
  int max_batch_size = 0;                 // --max_batch_size
  std::int64_t max_batch_delay_us = 500;  // --max_batch_delay_us

  // The most matrix bytes one WriteRange or ReadRange carries: a message less room for its other
  // fields.
  std::int64_t max_range_bytes() const { return max_message_bytes - 1024; }
};

// The limits themselves, checked once at start-up (limits.cc): INVALID_ARGUMENT naming the flag
// when one is out of its range (e.g. --max_dimension above 2^31 - 1: the kernels take 32-bit
// dimensions; --max_message_bytes outside [1024, 2^31 - 1]).
absl::Status check_limits(const ServiceLimits& limits);

}  // namespace matserve::server
