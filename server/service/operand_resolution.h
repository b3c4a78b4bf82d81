// Resolution of what a request names outside its own bytes, apart from the checks of the request
// itself (validation.cc): resident matrices by handle, found among the caller's own and locked
// for the job in creation order, so that concurrent requests cannot deadlock; and places in the
// caller's shared-memory regions, found, bounds-checked and held for the job, a device region's
// place viewed as a resident-like matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/types.h"
#include "matserve/v1/matrix_service.pb.h"
#include "server/runtime/resident_store.h"
#include "server/runtime/shared_memory_regions.h"
#include "server/service/validation.h"

namespace matserve::server {

// The shared-memory places a request names: each region resolved (and held for the job), each
// range checked against its region, and the result's range checked against the operands'.
class SharedMemoryPlaces {
 public:
  // `resolve` may be null: every place is then refused (shared memory is not for this RPC).
  explicit SharedMemoryPlaces(const RegionResolver* resolve) : resolve_(resolve) {}

  struct Place {
    std::shared_ptr<SharedMemoryRegion> region;
    std::span<std::byte> range;  // host memory, or device memory of a device region
  };

  // `bytes` at `ref` for `field` (e.g. "a.shm"); an output's bytes must not overlap an input's in
  // the underlying object, whichever registrations name them.
  absl::StatusOr<Place> place(const std::string& field, const v1::SharedMemoryRef& ref,
                              std::int64_t bytes, bool output);

  // The regions of every place so far, each once, for the job to hold.
  std::vector<std::shared_ptr<SharedMemoryRegion>> take_regions() { return std::move(regions_); }

 private:
  // An input's bytes, as a range of the object its region lies in: two registrations of one
  // object (under two names) are the same bytes.
  struct Use {
    std::string field;
    SharedMemoryRegion::ObjectId object;
    std::int64_t begin;
    std::int64_t end;
  };
  const RegionResolver* resolve_;
  std::vector<std::shared_ptr<SharedMemoryRegion>> regions_;
  std::vector<Use> inputs_;
};

// A resident-like view of a device region's place (CUDA IPC): not in the store, owned by the
// client, read and written in place by the backend.
std::shared_ptr<ResidentMatrix> device_view(const SharedMemoryPlaces::Place& p, std::int64_t rows,
                                            std::int64_t cols, kernels::DType dtype,
                                            kernels::Layout layout);

// The resident matrices a request names, resolved, then locked (shared, or exclusive for an
// in-place transpose) in creation order (ResidentMatrix::serial).
class ResidentOperands {
 public:
  // `resolve` must outlive this object.
  explicit ResidentOperands(const HandleResolver& resolve) : resolve_(resolve) {}

  // Resolves `handle` (when non-empty) for `field`; null for an empty handle.
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> add(const std::string& field,
                                                      const std::string& handle);
  // Locks every matrix added, each once.
  std::vector<ResidentLock> lock(bool exclusive);

 private:
  const HandleResolver& resolve_;
  std::vector<std::shared_ptr<ResidentMatrix>> all_;
};

}  // namespace matserve::server
