// Ranged-transfer RPCs of MatrixService: CreateResident (an empty resident matrix, its quota and
// memory held from acceptance), WriteRange (one range of its bytes; many run at once, over
// several connections), ReadRange (one range of any complete resident matrix).
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/matrix_service.h"
#include "server/service/service_context.h"
#include "server/service/status_mapping.h"
#include "server/service/validation.h"

namespace matserve::server {
namespace {

absl::Status check_offset(std::int64_t offset) {
  if (offset >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("offset: ", offset, " is negative"));
}

}  // namespace

grpc::Status MatrixServiceImpl::CreateResident(grpc::ServerContext* context,
                                               const v1::CreateResidentRequest* request,
                                               v1::UploadReply* reply) {
  const absl::Time start = absl::Now();
  const CallScope call = begin_call(/*heavy=*/false);
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kResident, "CreateResident");
    if (!owner.ok()) return owner.status();
    if (!request->has_header()) {
      return absl::InvalidArgumentError("header: missing (rows, cols, dtype, layout)");
    }
    const v1::Matrix& header = request->header();
    if (!header.data().empty() || header.has_shm()) {
      return absl::InvalidArgumentError(
          absl::StrCat(header.has_shm() ? "header.shm" : "header.data",
                       ": must be empty; the bytes arrive by WriteRange"));
    }
    absl::StatusOr<HostMatrix> h = validate_header("header", header, limits_);
    if (!h.ok()) return h.status();
    // The quota is reserved before any memory is taken; once the matrix is published (below) it
    // counts in the reservation's place.
    absl::StatusOr<QuotaReservation> quota = gate_.reserve_quota(*owner, h->bytes());
    if (!quota.ok()) return quota.status();
    absl::StatusOr<int> device = gate_.placement("colocate_with", request->colocate_with(), *owner);
    if (!device.ok()) return device.status();
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> m = runtime_.create_filling(
        h->rows, h->cols, h->dtype, h->layout, *owner, *device, waiter_of(*context));
    if (!m.ok()) return m.status();
    fill_resident(**m, reply->mutable_resident());
    return absl::OkStatus();
  }();
  if (!status.ok()) reply->Clear();
  record_simple("CreateResident", status, static_cast<std::int64_t>(request->ByteSizeLong()),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return to_grpc(status);
}

grpc::Status MatrixServiceImpl::WriteRange(grpc::ServerContext* context,
                                           const v1::WriteRangeRequest* request,
                                           v1::WriteRangeReply* reply) {
  const absl::Time start = absl::Now();
  const std::string& data = request->data();
  const CallScope call = begin_call(data.size() >= CpuKeepAwake::kHeavyCallBytes);
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kResident, "WriteRange");
    if (!owner.ok()) return owner.status();
    if (absl::Status s = check_offset(request->offset()); !s.ok()) return s;
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
        runtime_.residents().find("handle", request->handle(), *owner);
    if (!m.ok()) return m.status();
    const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data.data()),
                                           data.size());
    absl::StatusOr<bool> completed = runtime_.write_range(
        *m, static_cast<std::size_t>(request->offset()), bytes, waiter_of(*context));
    if (!completed.ok()) return completed.status();
    reply->set_complete(*completed);
    reply->set_bytes_received(static_cast<std::int64_t>((*m)->fill->written()));
    return absl::OkStatus();
  }();
  if (!status.ok()) reply->Clear();
  record_simple("WriteRange", status, static_cast<std::int64_t>(request->ByteSizeLong()),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return to_grpc(status);
}

grpc::Status MatrixServiceImpl::ReadRange(grpc::ServerContext* context,
                                          const v1::ReadRangeRequest* request,
                                          v1::ReadRangeReply* reply) {
  const absl::Time start = absl::Now();
  const std::int64_t length = request->length();
  const CallScope call =
      begin_call(length >= static_cast<std::int64_t>(CpuKeepAwake::kHeavyCallBytes));
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kResident, "ReadRange");
    if (!owner.ok()) return owner.status();
    if (absl::Status s = check_offset(request->offset()); !s.ok()) return s;
    if (length <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("length: ", length, "; a range is 1 or more bytes"));
    }
    if (length > limits_.max_range_bytes()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "length: ", length, " bytes, more than one message may carry (",
          limits_.max_range_bytes(), ", ServerLimits.max_range_bytes, from --max_message_bytes)"));
    }
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
        runtime_.residents().get("handle", request->handle(), *owner);
    if (!m.ok()) return m.status();
    ResidentLock lock(*m, /*exclusive=*/false);
    const auto total = static_cast<std::int64_t>((*m)->bytes());
    const std::int64_t offset = request->offset();
    if (offset > total || length > total - offset) {
      return absl::OutOfRangeError(
          absl::StrCat("offset: the range [", offset, ", ", offset + length,
                       ") passes the end of the resident matrix (", total, " bytes)"));
    }
    std::string* data = reply->mutable_data();
    data->resize(static_cast<std::size_t>(length));
    return runtime_.read(
        **m, static_cast<std::size_t>(offset),
        {reinterpret_cast<std::byte*>(data->data()), static_cast<std::size_t>(length)},
        waiter_of(*context));
  }();
  if (!status.ok()) reply->Clear();
  record_simple("ReadRange", status, static_cast<std::int64_t>(request->ByteSizeLong()),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return to_grpc(status);
}

}  // namespace matserve::server
