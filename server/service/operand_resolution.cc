// Handles and shared-memory places of a request, resolved and held: see operand_resolution.h.
#include "server/service/operand_resolution.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/runtime/quote.h"

namespace matserve::server {

using absl::StrCat;

absl::StatusOr<SharedMemoryPlaces::Place> SharedMemoryPlaces::place(const std::string& field,
                                                                    const v1::SharedMemoryRef& ref,
                                                                    std::int64_t bytes,
                                                                    bool output) {
  if (resolve_ == nullptr) {
    return absl::InvalidArgumentError(StrCat(
        field, ": shared memory is for Upload, Multiply and Transpose; send the bytes instead"));
  }
  if (ref.region().empty()) {
    return absl::InvalidArgumentError(StrCat(field, ".region: missing (a registered name)"));
  }
  if (ref.offset() < 0) {
    return absl::InvalidArgumentError(
        StrCat(field, ".offset: must be >= 0 (got ", ref.offset(), ")"));
  }
  absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> region =
      (*resolve_)(field + ".region", ref.region());
  if (!region.ok()) return region.status();
  const std::int64_t size = (*region)->info().byte_size;
  if (ref.offset() > size || bytes > size - ref.offset()) {
    return absl::InvalidArgumentError(StrCat(field, ": offset ", ref.offset(), " + ", bytes,
                                             " bytes exceeds region ", quote(ref.region()), " of ",
                                             size, " bytes"));
  }
  const std::span<std::byte> range = (*region)->bytes().subspan(
      static_cast<std::size_t>(ref.offset()), static_cast<std::size_t>(bytes));
  const std::int64_t begin = (*region)->object_offset() + ref.offset();
  const std::int64_t end = begin + bytes;
  if (output) {
    for (const Use& in : inputs_) {
      if (in.object == (*region)->object() && begin < in.end && in.begin < end) {
        return absl::InvalidArgumentError(StrCat(field, ": overlaps the bytes of ", in.field,
                                                 " (the result needs a place of its own)"));
      }
    }
  } else {
    inputs_.push_back({field, (*region)->object(), begin, end});
  }
  if (std::find(regions_.begin(), regions_.end(), *region) == regions_.end()) {
    regions_.push_back(*region);  // held once, however many places it holds
  }
  return Place{*std::move(region), range};
}

std::shared_ptr<ResidentMatrix> device_view(const SharedMemoryPlaces::Place& p, std::int64_t rows,
                                            std::int64_t cols, kernels::DType dtype,
                                            kernels::Layout layout) {
  auto m = std::make_shared<ResidentMatrix>();
  m->device = p.region->device();
  m->device_label = p.region->device_label();
  m->block = MemoryPool::Block::external(p.range.data(), p.range.size());
  m->dtype = dtype;
  m->layout = layout;
  absl::MutexLock lock(&m->mu);
  m->rows = rows;
  m->cols = cols;
  return m;
}

absl::StatusOr<std::shared_ptr<ResidentMatrix>> ResidentOperands::add(const std::string& field,
                                                                      const std::string& handle) {
  if (handle.empty()) return std::shared_ptr<ResidentMatrix>();
  absl::StatusOr<std::shared_ptr<ResidentMatrix>> m = resolve_(field, handle);
  if (m.ok()) all_.push_back(*m);
  return m;
}

std::vector<ResidentLock> ResidentOperands::lock(bool exclusive) {
  std::sort(all_.begin(), all_.end(), [](const auto& x, const auto& y) {
    return std::pair(x->serial, x.get()) < std::pair(y->serial, y.get());
  });
  all_.erase(std::unique(all_.begin(), all_.end()), all_.end());
  std::vector<ResidentLock> locks;
  for (const auto& m : all_) locks.emplace_back(m, exclusive);
  return locks;
}

}  // namespace matserve::server
