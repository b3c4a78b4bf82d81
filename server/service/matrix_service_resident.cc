// Resident-matrix RPCs of MatrixService: Upload (unary and streamed), Download (unary and
// streamed), Release, ListResident; plus the resident-matrix helpers the compute RPCs share.
#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/matrix_service.h"
#include "server/service/proto_convert.h"
#include "server/service/service_context.h"
#include "server/service/status_mapping.h"
#include "server/service/stream_idle_timer.h"
#include "server/service/validation.h"

namespace matserve::server {
namespace {

constexpr std::int64_t kDefaultChunk = std::int64_t{4} << 20;
constexpr std::int64_t kMinChunk = std::int64_t{4} << 10;

v1::Layout layout_proto(kernels::Layout l) {
  return l == kernels::Layout::kRowMajor ? v1::ROW_MAJOR : v1::COL_MAJOR;
}

}  // namespace

absl::Duration MatrixServiceImpl::stream_idle_timeout() const {
  return absl::Seconds(limits_.stream_idle_timeout_seconds);
}

absl::Status MatrixServiceImpl::stream_idle_error(const char* field) const {
  return absl::DeadlineExceededError(absl::StrCat(
      field, ": no chunk moved for ", limits_.stream_idle_timeout_seconds,
      " s (--stream_idle_timeout_seconds); the stream was cancelled and its memory freed"));
}

void MatrixServiceImpl::fill_resident(ResidentMatrix& m, v1::ResidentInfo* out) {
  absl::ReaderMutexLock lock(&m.mu);
  out->set_handle(m.handle);
  out->set_rows(m.rows);
  out->set_cols(m.cols);
  out->set_dtype(to_proto(m.dtype));
  out->set_layout(layout_proto(m.layout));
  out->set_bytes(static_cast<std::int64_t>(m.bytes()));
  out->set_device(m.device_label);
  out->set_idle_expires_in_ms(runtime_.residents().expires_in_ms(m));
  if (!m.usable()) {
    out->set_state(v1::RESIDENT_FILLING);
    out->set_bytes_missing(static_cast<std::int64_t>(m.fill->total() - m.fill->written()));
  }
}

void MatrixServiceImpl::record_simple(const std::string& rpc, const absl::Status& status,
                                      std::int64_t received, std::int64_t sent, absl::Time start) {
  RequestRecord rec{
      .rpc = rpc, .op = "resident", .variant = "none", .precision = "none", .device = "none"};
  rec.code = absl::StatusCodeToString(status.code());
  rec.bytes_received = received;
  rec.bytes_sent = sent;
  rec.times.total_us = absl::ToDoubleMicroseconds(absl::Now() - start);
  metrics_.record(std::move(rec));
}

grpc::Status MatrixServiceImpl::Upload(grpc::ServerContext* context,
                                       const v1::UploadRequest* request, v1::UploadReply* reply) {
  const absl::Time start = absl::Now();
  const std::size_t request_bytes = request->ByteSizeLong();
  const CallScope call = begin_call(request_bytes >= CpuKeepAwake::kHeavyCallBytes);
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner = gate_.authorize(*context, Permission::kResident, "Upload");
    if (!owner.ok()) return owner.status();
    if (!request->has_matrix()) return absl::InvalidArgumentError("matrix: missing");
    // The bytes in the message, or at a place in one of the caller's shared-memory regions
    // (held mapped until the upload is done).
    const RegionResolver regions = gate_.regions(*owner);
    std::shared_ptr<SharedMemoryRegion> region;
    absl::StatusOr<HostMatrix> m =
        validate_matrix("matrix", request->matrix(), limits_, &regions, &region);
    if (!m.ok()) return m.status();
    absl::StatusOr<QuotaReservation> quota = gate_.reserve_quota(*owner, m->bytes());
    if (!quota.ok()) return quota.status();
    absl::StatusOr<int> device = gate_.placement("colocate_with", request->colocate_with(), *owner);
    if (!device.ok()) return device.status();
    const Waiter waiter = waiter_of(*context);
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> r =
        runtime_.begin_upload(m->rows, m->cols, m->dtype, m->layout, *owner, *device, waiter);
    if (!r.ok()) return r.status();
    if (absl::Status s = runtime_.write(**r, 0, m->data, waiter); !s.ok()) return s;
    if (region != nullptr) {
      if (absl::Status s = region->check_not_faulted(); !s.ok()) return s;
    }
    if (absl::Status s = abandoned(*context, "the upload", start); !s.ok()) return s;
    runtime_.publish(*r);
    fill_resident(**r, reply->mutable_resident());
    return absl::OkStatus();
  }();
  if (!status.ok()) reply->Clear();
  record_simple("Upload", status, static_cast<std::int64_t>(request_bytes),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return to_grpc(status);
}

grpc::Status MatrixServiceImpl::UploadStream(grpc::ServerContext* context,
                                             grpc::ServerReader<v1::UploadChunk>* reader,
                                             v1::UploadReply* reply) {
  return upload_stream(context, reader, reply);
}

grpc::Status MatrixServiceImpl::upload_stream(grpc::ServerContext* context,
                                              grpc::ServerReaderInterface<v1::UploadChunk>* reader,
                                              v1::UploadReply* reply) {
  const absl::Time start = absl::Now();
  const CallScope call = begin_call(/*heavy=*/true);
  std::int64_t received = 0;
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kResident, "UploadStream");
    if (!owner.ok()) return owner.status();
    StreamIdleTimer idle(*context, stream_idle_timeout());
    v1::UploadChunk chunk;
    if (!reader->Read(&chunk)) {
      if (idle.fired()) return stream_idle_error("header");
      return absl::InvalidArgumentError("header: the stream ended before its first chunk");
    }
    if (!chunk.has_header()) {
      return absl::InvalidArgumentError("header: missing in the first chunk (rows, cols, dtype)");
    }
    if (!chunk.header().data().empty()) {
      return absl::InvalidArgumentError("header.data: must be empty; send bytes in `data`");
    }
    if (chunk.header().has_shm()) {
      return absl::InvalidArgumentError(
          "header.shm: shared memory is for Upload (one message), Multiply and Transpose; "
          "UploadStream carries the bytes in `data`");
    }
    absl::StatusOr<HostMatrix> h = validate_header("header", chunk.header(), limits_);
    if (!h.ok()) return h.status();
    absl::StatusOr<QuotaReservation> quota = gate_.reserve_quota(*owner, h->bytes());
    if (!quota.ok()) return quota.status();
    absl::StatusOr<int> device = gate_.placement("colocate_with", chunk.colocate_with(), *owner);
    if (!device.ok()) return device.status();
    // Memory is taken only now, after the header passed every limit.
    const Waiter waiter = waiter_of(*context);
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
        runtime_.begin_upload(h->rows, h->cols, h->dtype, h->layout, *owner, *device, waiter);
    if (!m.ok()) return m.status();
    const std::size_t expected = h->bytes();
    std::size_t offset = 0;
    bool first = true;
    do {
      received += static_cast<std::int64_t>(chunk.ByteSizeLong());
      if (!first && (chunk.has_header() || !chunk.colocate_with().empty())) {
        return absl::InvalidArgumentError(
            absl::StrCat(chunk.has_header() ? "header" : "colocate_with",
                         ": only the first chunk may carry one"));
      }
      const std::string& data = chunk.data();
      if (offset + data.size() > expected) {
        return absl::InvalidArgumentError(absl::StrCat("data: the stream carries more than the ",
                                                       expected, " bytes its header announces"));
      }
      const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data.data()),
                                             data.size());
      if (absl::Status s = runtime_.write(**m, offset, bytes, waiter); !s.ok()) return s;
      offset += data.size();
      first = false;
      idle.touch();
    } while (reader->Read(&chunk));
    if (idle.fired()) return stream_idle_error("data");
    if (offset != expected && !context->IsCancelled()) {
      return absl::InvalidArgumentError(absl::StrCat("data: the stream ended after ", offset,
                                                     " of ", expected, " bytes (truncated)"));
    }
    if (absl::Status s = abandoned(*context, "the upload", start); !s.ok()) return s;
    runtime_.publish(*m);
    fill_resident(**m, reply->mutable_resident());
    return absl::OkStatus();
  }();
  if (!status.ok()) reply->Clear();
  record_simple("UploadStream", status, received, static_cast<std::int64_t>(reply->ByteSizeLong()),
                start);
  return to_grpc(status);
}

grpc::Status MatrixServiceImpl::Download(grpc::ServerContext* context,
                                         const v1::DownloadRequest* request,
                                         v1::DownloadReply* reply) {
  const absl::Time start = absl::Now();
  const CallScope call = begin_call(/*heavy=*/false);
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kResident, "Download");
    if (!owner.ok()) return owner.status();
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
        runtime_.residents().get("handle", request->handle(), *owner);
    if (!m.ok()) return m.status();
    ResidentLock lock(*m, /*exclusive=*/false);
    if (static_cast<std::int64_t>((*m)->bytes()) > limits_.max_range_bytes()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "handle: the matrix is ", (*m)->bytes(), " bytes, more than one message may carry (",
          limits_.max_message_bytes, ", --max_message_bytes): use DownloadStream"));
    }
    v1::Matrix* out = reply->mutable_matrix();
    out->set_rows((*m)->rows);
    out->set_cols((*m)->cols);
    out->set_dtype(to_proto((*m)->dtype));
    out->set_layout(layout_proto((*m)->layout));
    std::string* data = out->mutable_data();
    data->resize((*m)->bytes());
    return runtime_.read(**m, 0, {reinterpret_cast<std::byte*>(data->data()), data->size()},
                         waiter_of(*context));
  }();
  if (!status.ok()) reply->Clear();
  record_simple("Download", status, static_cast<std::int64_t>(request->ByteSizeLong()),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return to_grpc(status);
}

grpc::Status MatrixServiceImpl::DownloadStream(grpc::ServerContext* context,
                                               const v1::DownloadRequest* request,
                                               grpc::ServerWriter<v1::DownloadChunk>* writer) {
  return download_stream(context, request, writer);
}

grpc::Status MatrixServiceImpl::download_stream(
    grpc::ServerContext* context, const v1::DownloadRequest* request,
    grpc::ServerWriterInterface<v1::DownloadChunk>* writer) {
  const absl::Time start = absl::Now();
  const CallScope call = begin_call(/*heavy=*/true);
  std::int64_t sent = 0;
  const absl::Status status = [&]() -> absl::Status {
    absl::StatusOr<std::string> owner =
        gate_.authorize(*context, Permission::kResident, "DownloadStream");
    if (!owner.ok()) return owner.status();
    const std::int64_t max_chunk = limits_.max_message_bytes / 2;
    const std::int64_t chunk_bytes =
        request->chunk_bytes() == 0 ? std::min(kDefaultChunk, max_chunk) : request->chunk_bytes();
    if (chunk_bytes < kMinChunk || chunk_bytes > max_chunk) {
      return absl::InvalidArgumentError(absl::StrCat("chunk_bytes: ", chunk_bytes, " is outside [",
                                                     kMinChunk, ", ", max_chunk,
                                                     "] (half of --max_message_bytes)"));
    }
    absl::StatusOr<std::shared_ptr<ResidentMatrix>> m =
        runtime_.residents().get("handle", request->handle(), *owner);
    if (!m.ok()) return m.status();
    ResidentLock lock(*m, /*exclusive=*/false);
    const Waiter waiter = waiter_of(*context);
    StreamIdleTimer idle(*context, stream_idle_timeout());
    const std::size_t total = (*m)->bytes();
    std::size_t offset = 0;
    bool first = true;
    while (first || offset < total) {
      v1::DownloadChunk chunk;
      if (first) {
        v1::Matrix* h = chunk.mutable_header();
        h->set_rows((*m)->rows);
        h->set_cols((*m)->cols);
        h->set_dtype(to_proto((*m)->dtype));
        h->set_layout(layout_proto((*m)->layout));
      }
      const std::size_t len =
          std::min<std::size_t>(static_cast<std::size_t>(chunk_bytes), total - offset);
      std::string* data = chunk.mutable_data();
      data->resize(len);
      if (absl::Status s =
              runtime_.read(**m, offset, {reinterpret_cast<std::byte*>(data->data()), len}, waiter);
          !s.ok()) {
        return s;
      }
      sent += static_cast<std::int64_t>(chunk.ByteSizeLong());
      if (!writer->Write(chunk)) {
        if (idle.fired()) return stream_idle_error("data");
        return absl::CancelledError("the client went away mid-download");
      }
      idle.touch();
      offset += len;
      first = false;
    }
    return absl::OkStatus();
  }();
  record_simple("DownloadStream", status, static_cast<std::int64_t>(request->ByteSizeLong()), sent,
                start);
  return to_grpc(status);
}

grpc::Status MatrixServiceImpl::Release(grpc::ServerContext* context,
                                        const v1::ReleaseRequest* request,
                                        v1::ReleaseReply* reply) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> owner = gate_.authorize(*context, Permission::kResident, "Release");
  const absl::StatusOr<std::int64_t> freed = [&]() -> absl::StatusOr<std::int64_t> {
    if (!owner.ok()) return owner.status();
    std::int64_t total = 0;
    absl::Status first_error;
    const auto release = [&](const std::string& handle) {
      absl::StatusOr<std::int64_t> one = runtime_.residents().release(handle, *owner);
      if (one.ok()) {
        total += *one;
      } else if (first_error.ok()) {
        first_error = one.status();
      }
    };
    // An empty handle with no list is looked up like any other unknown handle: NOT_FOUND.
    if (!request->handle().empty() || request->handles().empty()) release(request->handle());
    for (const std::string& handle : request->handles()) release(handle);
    if (!first_error.ok()) return first_error;
    return total;
  }();
  if (freed.ok()) reply->set_bytes_freed(*freed);
  record_simple("Release", freed.status(), static_cast<std::int64_t>(request->ByteSizeLong()),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return to_grpc(freed.status());
}

grpc::Status MatrixServiceImpl::ListResident(grpc::ServerContext* context,
                                             const v1::ListResidentRequest* request,
                                             v1::ListResidentReply* reply) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> owner =
      gate_.authorize(*context, Permission::kResident, "ListResident");
  if (!owner.ok()) {
    record_simple("ListResident", owner.status(), 0, 0, start);
    return to_grpc(owner.status());
  }
  std::int64_t total = 0;
  for (const auto& m : runtime_.residents().list(*owner)) {
    fill_resident(*m, reply->add_matrices());
    total += static_cast<std::int64_t>(m->bytes());
  }
  reply->set_total_bytes(total);
  record_simple("ListResident", absl::OkStatus(),
                static_cast<std::int64_t>(request->ByteSizeLong()),
                static_cast<std::int64_t>(reply->ByteSizeLong()), start);
  return grpc::Status::OK;
}

}  // namespace matserve::server
