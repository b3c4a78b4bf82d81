// matserve-cli's --shm transport: see shm_transport.h.
#include "client/cli/shm_transport.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace matserve::client::cli {
namespace {

std::int64_t round_up(std::int64_t n) {
  return (n + 4095) / 4096 * 4096;
}

}  // namespace

absl::StatusOr<ShmTransport> ShmTransport::create(Client& client,
                                                  const std::vector<v1::Matrix*>& operands,
                                                  std::int64_t result_bytes,
                                                  v1::SharedMemoryRef* output) {
  std::int64_t total = 0;
  for (const v1::Matrix* m : operands)
    total += round_up(static_cast<std::int64_t>(m->data().size()));
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::create(
      static_cast<std::size_t>(total + std::max<std::int64_t>(result_bytes, 1)));
  if (!object.ok()) return object.status();
  const std::string name = absl::StrCat("matserve-cli-", ::getpid());
  absl::StatusOr<v1::SharedMemoryRegion> region = client.register_shared_memory(
      name, object->key(), static_cast<std::int64_t>(object->bytes().size()));
  if (!region.ok()) return region.status();
  ShmTransport t(client, *std::move(object), name);
  std::int64_t offset = 0;
  for (v1::Matrix* m : operands) {
    std::memcpy(t.object_.bytes().data() + offset, m->data().data(), m->data().size());
    const auto size = static_cast<std::int64_t>(m->data().size());
    m->clear_data();
    m->mutable_shm()->set_region(name);
    m->mutable_shm()->set_offset(offset);
    offset += round_up(size);
  }
  t.result_offset_ = offset;
  t.result_bytes_ = result_bytes;
  output->set_region(name);
  output->set_offset(offset);
  return t;
}

ShmTransport::~ShmTransport() {
  if (!name_.empty() && client_ != nullptr) (void)client_->unregister_shared_memory(name_);
}

void ShmTransport::fetch_result(v1::Matrix& m) const {
  m.set_data(reinterpret_cast<const char*>(object_.bytes().data()) + result_offset_,
             static_cast<std::size_t>(result_bytes_));
}

}  // namespace matserve::client::cli
