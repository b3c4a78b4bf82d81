// Shared-memory region RPCs of MatrixService: RegisterSharedMemory, UnregisterSharedMemory,
// ListSharedMemory; plus the after-job check the compute RPCs use.
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/matrix_service.h"
#include "server/service/status_mapping.h"

namespace matserve::server {
namespace {

void fill_region(const SharedMemoryRegionInfo& info, v1::SharedMemoryRegion* out) {
  out->set_name(info.name);
  out->set_key(info.key);
  out->set_offset(info.offset);
  out->set_byte_size(info.byte_size);
  out->set_pinned(info.pinned);
  out->set_device(info.device);
}

}  // namespace

template <typename Request, typename Reply>
grpc::Status MatrixServiceImpl::finish_simple(const char* rpc, const absl::Status& status,
                                              const Request& request, Reply& reply,
                                              absl::Time start) {
  if (!status.ok()) reply.Clear();
  record_simple(rpc, status, static_cast<std::int64_t>(request.ByteSizeLong()),
                static_cast<std::int64_t>(reply.ByteSizeLong()), start);
  return to_grpc(status);
}

absl::Status MatrixServiceImpl::regions_intact(
    const std::vector<std::shared_ptr<SharedMemoryRegion>>& regions) {
  // The object's size too, not only the fault flag: a region the CUDA backend pinned takes no
  // fault when its object is truncated (its pinned pages stay mapped, cut off from the object),
  // and the result written there would be lost without a word.
  for (const auto& r : regions) {
    if (absl::Status s = r->check_intact(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

grpc::Status MatrixServiceImpl::RegisterSharedMemory(grpc::ServerContext* context,
                                                     const v1::RegisterSharedMemoryRequest* request,
                                                     v1::RegisterSharedMemoryReply* reply) {
  const absl::Time start = absl::Now();
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kSharedMemory, "RegisterSharedMemory");
    if (!owner.ok()) return owner.status();
    if (!limits_.shared_memory) return shared_memory_off("key");
    absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> region = runtime_.shared_memory().add(
        *owner, SharedMemoryRegionInfo{.name = request->name(),
                                       .key = request->key(),
                                       .offset = request->offset(),
                                       .byte_size = request->byte_size()});
    if (!region.ok()) return region.status();
    fill_region((*region)->info(), reply->mutable_region());
    return absl::OkStatus();
  }();
  // Possession not shown yet: the nonce to write into the object travels in trailing metadata.
  if (auto nonce = status.GetPayload(kShmNonceMetadataKey)) {
    context->AddTrailingMetadata(kShmNonceMetadataKey, std::string(*nonce));
  }
  return finish_simple("RegisterSharedMemory", status, *request, *reply, start);
}

grpc::Status MatrixServiceImpl::RegisterCudaMemory(grpc::ServerContext* context,
                                                   const v1::RegisterCudaMemoryRequest* request,
                                                   v1::RegisterSharedMemoryReply* reply) {
  const absl::Time start = absl::Now();
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kSharedMemory, "RegisterCudaMemory");
    if (!owner.ok()) return owner.status();
    if (!limits_.shared_memory) return shared_memory_off("ipc_handle");
    const std::string& handle = request->ipc_handle();
    absl::StatusOr<std::shared_ptr<SharedMemoryRegion>> region =
        runtime_.shared_memory().add_device(
            *owner,
            SharedMemoryRegionInfo{.name = request->name(),
                                   .offset = request->offset(),
                                   .byte_size = request->byte_size()},
            [&] {
              return runtime_.backend().open_ipc_memory(
                  {reinterpret_cast<const std::byte*>(handle.data()), handle.size()});
            });
    if (!region.ok()) return region.status();
    fill_region((*region)->info(), reply->mutable_region());
    return absl::OkStatus();
  }();
  return finish_simple("RegisterCudaMemory", status, *request, *reply, start);
}

grpc::Status MatrixServiceImpl::UnregisterSharedMemory(
    grpc::ServerContext* context, const v1::UnregisterSharedMemoryRequest* request,
    v1::UnregisterSharedMemoryReply* reply) {
  const absl::Time start = absl::Now();
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kSharedMemory, "UnregisterSharedMemory");
    if (!owner.ok()) return owner.status();
    absl::StatusOr<int> n = runtime_.shared_memory().remove(*owner, request->name());
    if (!n.ok()) return n.status();
    reply->set_unregistered(*n);
    return absl::OkStatus();
  }();
  return finish_simple("UnregisterSharedMemory", status, *request, *reply, start);
}

grpc::Status MatrixServiceImpl::ListSharedMemory(grpc::ServerContext* context,
                                                 const v1::ListSharedMemoryRequest* request,
                                                 v1::ListSharedMemoryReply* reply) {
  const absl::Time start = absl::Now();
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kSharedMemory, "ListSharedMemory");
    if (!owner.ok()) return owner.status();
    for (const SharedMemoryRegionInfo& info : runtime_.shared_memory().list(*owner)) {
      fill_region(info, reply->add_regions());
    }
    return absl::OkStatus();
  }();
  return finish_simple("ListSharedMemory", status, *request, *reply, start);
}

}  // namespace matserve::server
