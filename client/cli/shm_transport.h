// matserve-cli's --shm: a request's inline operands moved into a shared-memory region of this
// process (created and registered for the call, unregistered and removed afterwards) and its
// result placed there too, so that no matrix bytes cross gRPC. The server must run on this node
// and share /dev/shm.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cpp/client.h"
#include "client/cpp/shared_memory.h"

namespace matserve::client::cli {

class ShmTransport {
 public:
  // Copies each operand's bytes into one new region (4 KiB aligned places), replaces them with
  // Matrix.shm, and points `output` at a place for `result_bytes`. Registers the region.
  static absl::StatusOr<ShmTransport> create(Client& client,
                                             const std::vector<v1::Matrix*>& operands,
                                             std::int64_t result_bytes,
                                             v1::SharedMemoryRef* output);
  ShmTransport(ShmTransport&& o) noexcept
      : client_(o.client_),
        object_(std::move(o.object_)),
        name_(std::exchange(o.name_, {})),
        result_offset_(o.result_offset_),
        result_bytes_(o.result_bytes_) {}
  ShmTransport& operator=(ShmTransport&&) = delete;
  ~ShmTransport();  // unregisters (the object itself goes with `object_`)

  // The result's bytes, copied out of the region into `m.data` (m keeps its shape).
  void fetch_result(v1::Matrix& m) const;

 private:
  ShmTransport(Client& client, SharedMemoryObject object, std::string name)
      : client_(&client), object_(std::move(object)), name_(std::move(name)) {}

  Client* client_;
  SharedMemoryObject object_;
  std::string name_;
  std::int64_t result_offset_ = 0;
  std::int64_t result_bytes_ = 0;
};

}  // namespace matserve::client::cli
