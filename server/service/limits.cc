// The start-up checks of the request limits (see limits.h): each flag's range, with a message
// naming the flag. config.cc calls them once, with its checks of the other flags; requests are
// checked against the limits in validation.cc.
#include "server/service/limits.h"

#include "absl/strings/str_cat.h"

namespace matserve::server {

using absl::StrCat;

absl::Status check_limits(const ServiceLimits& limits) {
  constexpr std::int64_t kMaxInt32 = 2147483647;
  if (limits.max_message_bytes < 1024 || limits.max_message_bytes > kMaxInt32) {
    return absl::InvalidArgumentError("max_message_bytes: must be in [1024, 2147483647]");
  }
  if (limits.max_dimension < 1 || limits.max_dimension > kMaxInt32) {
    return absl::InvalidArgumentError(StrCat("max_dimension: must be in [1, ", kMaxInt32,
                                             "] (the kernels take 32-bit dimensions; got ",
                                             limits.max_dimension, ")"));
  }
  if (limits.max_matrix_bytes < 1) {
    return absl::InvalidArgumentError(
        StrCat("max_matrix_bytes: must be >= 1 (got ", limits.max_matrix_bytes, ")"));
  }
  if (limits.max_resident_bytes_per_owner < 0) {
    return absl::InvalidArgumentError(
        StrCat("max_resident_bytes_per_owner: must be >= 0 (0: no per-caller limit; got ",
               limits.max_resident_bytes_per_owner, ")"));
  }
  if (!(limits.max_verify_flops >= 0)) {
    return absl::InvalidArgumentError(StrCat(
        "max_verify_flops: must be >= 0 (0: verify refused; got ", limits.max_verify_flops, ")"));
  }
  if (limits.stream_idle_timeout_seconds < 0) {
    return absl::InvalidArgumentError(
        StrCat("stream_idle_timeout_seconds: must be >= 0 (0: never; got ",
               limits.stream_idle_timeout_seconds, ")"));
  }
  if (limits.max_batch_products < 1) {
    return absl::InvalidArgumentError(
        StrCat("max_batch_products: must be >= 1 (got ", limits.max_batch_products, ")"));
  }
  if (limits.max_batch_size < 0 || limits.max_batch_size > 65535) {
    return absl::InvalidArgumentError(
        StrCat("max_batch_size: must be in [0, 65535] (0: dynamic batching off; got ",
               limits.max_batch_size, ")"));
  }
  if (limits.max_batch_delay_us < 0 || limits.max_batch_delay_us > 1000000) {
    return absl::InvalidArgumentError(StrCat("max_batch_delay_us: must be in [0, 1000000] (got ",
                                             limits.max_batch_delay_us, ")"));
  }
  if (limits.max_shm_regions_per_owner < 0) {
    return absl::InvalidArgumentError(
        StrCat("max_shm_regions_per_owner: must be >= 0 (0: none; got ",
               limits.max_shm_regions_per_owner, ")"));
  }
  if (limits.max_shared_memory_bytes_per_owner < 0) {
    return absl::InvalidArgumentError(
        StrCat("max_shared_memory_bytes_per_owner: must be >= 0 (0: no host region; got ",
               limits.max_shared_memory_bytes_per_owner, ")"));
  }
  if (limits.max_shared_memory_bytes < 0) {
    return absl::InvalidArgumentError(
        StrCat("max_shared_memory_bytes: must be >= 0 (0: no host region; got ",
               limits.max_shared_memory_bytes, ")"));
  }
  if (limits.max_verify_bytes < 0) {
    return absl::InvalidArgumentError(StrCat(
        "max_verify_bytes: must be >= 0 (0: verify refused; got ", limits.max_verify_bytes, ")"));
  }
  return absl::OkStatus();
}

}  // namespace matserve::server
