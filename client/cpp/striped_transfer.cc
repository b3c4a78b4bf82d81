// Striped transfer over several connections: see striped_transfer.h.
#include "client/cpp/striped_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/notification.h"
#include "client/cpp/client.h"
#include "client/cpp/range_wire.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/stub_options.h"

namespace matserve::client {
std::int64_t inline_bytes(bool present, const v1::Matrix& m) {
  if (!present) return 0;
  if (m.has_shm()) return -1;
  return static_cast<std::int64_t>(m.data().size());
}

namespace {
constexpr char kWriteRange[] = "/matserve.v1.MatrixService/WriteRange";
constexpr char kReadRange[] = "/matserve.v1.MatrixService/ReadRange";
}  // namespace

StripedTransfer::StripedTransfer(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                 std::function<void(grpc::ClientContext&)> prepare,
                                 std::int64_t chunk_bytes)
    : prepare_(std::move(prepare)), chunk_bytes_(std::max<std::int64_t>(chunk_bytes, 1)) {
  for (std::shared_ptr<grpc::Channel>& c : channels) {
    auto stub = v1::MatrixService::NewStub(c);
    stripes_.push_back({std::move(stub), std::make_unique<grpc::GenericStub>(std::move(c))});
  }
}

absl::Status StripedTransfer::call(Stripe& stripe, const char* method,
                                   const grpc::ByteBuffer& request, grpc::ByteBuffer* reply) {
  grpc::ClientContext context;
  prepare_(context);
  absl::Notification done;
  grpc::Status status;
  stripe.generic->UnaryCall(&context, method, grpc::StubOptions(), &request, reply,
                            [&](grpc::Status s) {
                              status = std::move(s);
                              done.Notify();
                            });
  done.WaitForNotification();
  return from_grpc_status(status);
}

void StripedTransfer::limit_chunk_bytes(std::int64_t limit) {
  if (limit <= 0) return;
  std::int64_t now = chunk_bytes_.load();
  while (limit < now && !chunk_bytes_.compare_exchange_weak(now, limit)) {
  }
}

std::vector<StripedTransfer::Range> StripedTransfer::split(
    std::span<const std::int64_t> sizes) const {
  const std::int64_t chunk = chunk_bytes_.load();
  std::vector<Range> ranges;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (std::int64_t off = 0; off < sizes[i]; off += chunk) {
      ranges.push_back({i, off, std::min(chunk, sizes[i] - off)});
    }
  }
  return ranges;
}

absl::Status StripedTransfer::run(const std::vector<Range>& ranges,
                                  const std::function<absl::Status(Stripe&, const Range&)>& one) {
  std::atomic<std::size_t> next{0};
  std::mutex mu;
  absl::Status first_error;
  std::atomic<bool> failed{false};
  const auto worker = [&](Stripe& stripe) {
    for (std::size_t i = next++; i < ranges.size() && !failed.load(); i = next++) {
      absl::Status s = one(stripe, ranges[i]);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = std::move(s);
        failed.store(true);
      }
    }
  };
  const std::size_t n = std::min(stripes_.size(), ranges.size());
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t t = 1; t < n; ++t) threads.emplace_back(worker, std::ref(stripes_[t]));
  if (n > 0) worker(stripes_[0]);
  for (std::thread& t : threads) t.join();
  return first_error;
}

// One CreateResident in flight: its request, reply and status once done.
struct StripedTransfer::Creation {
  grpc::ClientContext context;
  v1::CreateResidentRequest request;
  v1::UploadReply reply;
  grpc::Status status;
};

void StripedTransfer::start_create(Stripe& stripe, Creation& c, const v1::Matrix& header,
                                   const std::string& colocate_with,
                                   absl::BlockingCounter& pending) {
  v1::Matrix* h = c.request.mutable_header();
  h->set_rows(header.rows());
  h->set_cols(header.cols());
  h->set_dtype(header.dtype());
  h->set_layout(header.layout());
  c.request.set_colocate_with(colocate_with);
  prepare_(c.context);
  stripe.stub->async()->CreateResident(&c.context, &c.request, &c.reply,
                                       [&c, &pending](grpc::Status status) {
                                         c.status = std::move(status);
                                         pending.DecrementCount();
                                       });
}

absl::Status StripedTransfer::release(const std::string& handle) {
  grpc::ClientContext context;
  prepare_(context);
  v1::ReleaseRequest request;
  request.add_handles(handle);
  v1::ReleaseReply reply;
  return from_grpc_status(stripes_[0].stub->Release(&context, request, &reply));
}

absl::Status StripedTransfer::create_all(std::span<const Source> sources,
                                         std::vector<v1::ResidentInfo>& infos,
                                         std::vector<std::string>& made) {
  if (sources.empty()) return absl::OkStatus();
  // Every matrix at once, on the stripes in turn: one round trip, not one per matrix.
  std::deque<Creation> creations(sources.size());
  {
    absl::BlockingCounter pending(static_cast<int>(sources.size()));
    for (std::size_t i = 0; i < sources.size(); ++i) {
      start_create(stripes_[i % stripes_.size()], creations[i], *sources[i].header, "", pending);
    }
    pending.Wait();
  }
  const std::size_t base = made.size();
  absl::Status first_error;
  for (Creation& c : creations) {
    if (c.status.ok()) {
      made.push_back(c.reply.resident().handle());
    } else if (first_error.ok()) {
      first_error = from_grpc_status(c.status);
    }
  }
  if (!first_error.ok()) return first_error;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    infos.push_back(creations[i].reply.resident());
    // A multi-GPU server may place them apart: one off the first one's device is made again
    // beside it and takes its place in `made`; the misplaced one is released now (or, should that
    // fail, with the rest of `made`).
    if (i == 0 || infos[i].device() == infos[0].device()) continue;
    Creation again;
    absl::BlockingCounter pending(1);
    start_create(stripes_[0], again, *sources[i].header, infos[0].handle(), pending);
    pending.Wait();
    if (!again.status.ok()) return from_grpc_status(again.status);
    made[base + i] = again.reply.resident().handle();
    if (!release(infos[i].handle()).ok()) made.push_back(infos[i].handle());
    infos[i] = again.reply.resident();
  }
  return absl::OkStatus();
}

absl::Status StripedTransfer::put(std::span<const Source> sources, std::vector<std::string>& made) {
  std::vector<v1::ResidentInfo> infos;
  if (absl::Status s = create_all(sources, infos, made); !s.ok()) return s;
  std::vector<std::string> handles;
  std::vector<std::int64_t> sizes;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (infos[i].bytes() != static_cast<std::int64_t>(sources[i].bytes.size())) {
      return absl::InvalidArgumentError(absl::StrCat("the operand's data holds ",
                                                     sources[i].bytes.size(),
                                                     " bytes; its shape needs ", infos[i].bytes()));
    }
    handles.push_back(infos[i].handle());
    sizes.push_back(static_cast<std::int64_t>(sources[i].bytes.size()));
  }
  return run(split(sizes), [&](Stripe& stripe, const Range& r) {
    // The range is sent from the source's own bytes (range_wire.h); they outlive the call.
    const grpc::ByteBuffer request =
        write_range_request(handles[r.item], r.offset,
                            sources[r.item].bytes.substr(static_cast<std::size_t>(r.offset),
                                                         static_cast<std::size_t>(r.length)));
    grpc::ByteBuffer reply;
    return call(stripe, kWriteRange, request, &reply);
  });
}

absl::Status StripedTransfer::get(std::span<const Sink> sinks) {
  std::vector<std::int64_t> sizes;
  for (const Sink& s : sinks) sizes.push_back(static_cast<std::int64_t>(s.out.size()));
  return run(split(sizes), [&](Stripe& stripe, const Range& r) -> absl::Status {
    v1::ReadRangeRequest request;
    request.set_handle(sinks[r.item].handle);
    request.set_offset(r.offset);
    request.set_length(r.length);
    const std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    const grpc::ByteBuffer message(&slice, 1);
    grpc::ByteBuffer reply;
    if (absl::Status s = call(stripe, kReadRange, message, &reply); !s.ok()) return s;
    // Straight from the received slices into the caller's buffer (range_wire.h).
    return read_range_reply_into(reply,
                                 sinks[r.item].out.subspan(static_cast<std::size_t>(r.offset),
                                                           static_cast<std::size_t>(r.length)));
  });
}

}  // namespace matserve::client
