// Request limits the service enforces before it allocates anything for a request; each comes from
// a server flag and is reported by GetServerInfo.
#pragma once

#include <cstdint>

namespace matserve::server {

struct ServiceLimits {
  std::int64_t max_message_bytes = std::int64_t{1} << 30;  // --max_message_bytes
  std::int64_t max_dimension = 65536;                      // --max_dimension
  std::int64_t max_matrix_bytes = std::int64_t{16} << 30;  // --max_matrix_bytes
  std::int64_t max_resident_bytes_per_owner = 0;           // 0: only the device budget
};

}  // namespace matserve::server
