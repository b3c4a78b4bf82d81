// Striped transfer over several connections: see striped_transfer.h.
#include "client/cpp/striped_transfer.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>

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

std::vector<std::shared_ptr<grpc::Channel>> StripedTransfer::open_channels(
    const std::string& target, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const grpc::ChannelArguments& args, int count) {
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < count; ++i) {
    grpc::ChannelArguments stripe_args = args;
    stripe_args.SetInt("grpc.channel_id", i + 1);
    stripe_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channels.push_back(grpc::CreateCustomChannel(target, credentials, stripe_args));
  }
  return channels;
}

StripedTransfer::StripedTransfer(std::vector<std::shared_ptr<grpc::Channel>> channels,
                                 Prepare prepare, std::int64_t chunk_bytes)
    : prepare_(std::move(prepare)), chunk_bytes_(std::max<std::int64_t>(chunk_bytes, 1)) {
  for (std::shared_ptr<grpc::Channel>& c : channels) {
    auto stub = v1::MatrixService::NewStub(c);
    stripes_.push_back({std::move(stub), std::make_unique<grpc::GenericStub>(std::move(c))});
  }
  const std::size_t lanes = stripes_.size() * kRangesInFlightPerStripe;
  starters_ = std::make_unique<CallStarters>(std::min(lanes > 0 ? lanes - 1 : 0, kMaxStarters));
}

void StripedTransfer::limit_chunk_bytes(std::int64_t limit) {
  if (limit <= 0) return;
  std::int64_t now = chunk_bytes_.load();
  while (limit < now && !chunk_bytes_.compare_exchange_weak(now, limit)) {
  }
}

std::vector<StripedTransfer::Range> StripedTransfer::split(
    std::span<const std::int64_t> sizes) const {
  std::int64_t total = 0;
  for (std::int64_t s : sizes) total += s;
  const auto stripes = static_cast<std::int64_t>(stripes_.size());
  const std::int64_t even = (total + stripes - 1) / stripes;
  const std::int64_t chunk = std::min(chunk_bytes_.load(), std::max(even, kMinRangeBytes));
  std::vector<Range> ranges;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    for (std::int64_t off = 0; off < sizes[i]; off += chunk) {
      ranges.push_back({i, off, std::min(chunk, sizes[i] - off)});
    }
  }
  return ranges;
}

// The ranges of one run(): which is next, the lanes still going, the first error. Each lane is
// one call at a time on one stripe; its context and buffers are rebuilt for every range.
struct StripedTransfer::Flight {
  struct Lane {
    std::unique_ptr<grpc::ClientContext> context;
    grpc::ByteBuffer request;
    grpc::ByteBuffer reply;
  };
  Flight(const std::vector<Range>& r, const RangeCalls& c, const Prepare& p, std::size_t lanes)
      : ranges(r), calls(c), prepare(p), lane(lanes), going(static_cast<int>(lanes)) {}

  const std::vector<Range>& ranges;
  const RangeCalls& calls;
  const Prepare& prepare;
  std::vector<Lane> lane;
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  absl::Status first_error;  // guarded by mu
  absl::BlockingCounter going;

  void fail(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu);
    if (first_error.ok()) first_error = std::move(s);
    failed.store(true);
  }
};

void StripedTransfer::start_next(Flight& flight, std::size_t lane) {
  const std::size_t i = flight.next++;
  if (i >= flight.ranges.size() || flight.failed.load()) {
    flight.going.DecrementCount();
    return;
  }
  const Range& r = flight.ranges[i];
  Flight::Lane& l = flight.lane[lane];
  l.context = std::make_unique<grpc::ClientContext>();
  flight.prepare(*l.context);
  l.request = flight.calls.request(r);
  l.reply.Clear();
  stripes_[lane % stripes_.size()].generic->UnaryCall(
      l.context.get(), flight.calls.method, grpc::StubOptions(), &l.request, &l.reply,
      [this, &flight, lane, &r](grpc::Status status) {
        absl::Status s = from_grpc_status(status);
        if (s.ok()) s = flight.calls.done(r, flight.lane[lane].reply);
        if (!s.ok()) flight.fail(std::move(s));
        start_next(flight, lane);
      });
}

absl::Status StripedTransfer::run(const std::vector<Range>& ranges, const RangeCalls& calls,
                                  const Prepare& prepare) {
  const std::size_t lanes = std::min(stripes_.size() * kRangesInFlightPerStripe, ranges.size());
  if (lanes == 0) return absl::OkStatus();
  Flight flight(ranges, calls, prepare, lanes);
  // The first ranges start on the starter threads and this one at once, so that their bytes are
  // written to the connections in parallel. `flight` outlives every task: its lanes are counted
  // down only by start_next, which each task calls last.
  for (std::size_t lane = 1; lane < lanes; ++lane) {
    starters_->post([this, &flight, lane] { start_next(flight, lane); });
  }
  start_next(flight, 0);
  flight.going.Wait();
  std::lock_guard<std::mutex> lock(flight.mu);
  return flight.first_error;
}

// One CreateResident in flight: its request, reply and status once done.
struct StripedTransfer::Creation {
  grpc::ClientContext context;
  v1::CreateResidentRequest request;
  v1::UploadReply reply;
  grpc::Status status;
};

void StripedTransfer::start_create(Stripe& stripe, Creation& c, const v1::Matrix& header,
                                   const std::string& colocate_with, absl::BlockingCounter& pending,
                                   const Prepare& prepare) {
  v1::Matrix* h = c.request.mutable_header();
  h->set_rows(header.rows());
  h->set_cols(header.cols());
  h->set_dtype(header.dtype());
  h->set_layout(header.layout());
  c.request.set_colocate_with(colocate_with);
  prepare(c.context);
  stripe.stub->async()->CreateResident(&c.context, &c.request, &c.reply,
                                       [&c, &pending](grpc::Status status) {
                                         c.status = std::move(status);
                                         pending.DecrementCount();
                                       });
}

absl::Status StripedTransfer::release(std::span<const std::string> handles,
                                      const Prepare& prepare) {
  grpc::ClientContext context;
  prepare(context);
  v1::ReleaseRequest request;
  for (const std::string& h : handles) request.add_handles(h);
  v1::ReleaseReply reply;
  return from_grpc_status(stripes_[0].stub->Release(&context, request, &reply));
}

absl::StatusOr<std::string> StripedTransfer::unary(const std::string& method,
                                                   std::string_view request,
                                                   const Prepare& prepare) {
  grpc::ClientContext context;
  prepare(context);
  grpc::Slice slice(request.data(), request.size());
  const grpc::ByteBuffer message(&slice, 1);
  grpc::ByteBuffer reply;
  absl::Notification done;
  grpc::Status status;
  stripes_[0].generic->UnaryCall(&context, method, grpc::StubOptions(), &message, &reply,
                                 [&](grpc::Status s) {
                                   status = std::move(s);
                                   done.Notify();
                                 });
  done.WaitForNotification();
  if (!status.ok()) return from_grpc_status(status);
  grpc::Slice whole;
  if (!reply.DumpToSingleSlice(&whole).ok()) {
    return absl::DataLossError("the reply could not be read");
  }
  return std::string(reinterpret_cast<const char*>(whole.begin()), whole.size());
}

absl::Status StripedTransfer::create_all(std::span<const Source> sources,
                                         std::vector<v1::ResidentInfo>& infos,
                                         std::vector<std::string>& made, const Prepare& prepare,
                                         const std::string& colocate_with) {
  if (sources.empty()) return absl::OkStatus();
  // Every matrix at once, on the stripes in turn: one round trip, not one per matrix.
  std::deque<Creation> creations(sources.size());
  {
    absl::BlockingCounter pending(static_cast<int>(sources.size()));
    for (std::size_t i = 0; i < sources.size(); ++i) {
      start_create(stripes_[i % stripes_.size()], creations[i], *sources[i].header, colocate_with,
                   pending, prepare);
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
    start_create(stripes_[0], again, *sources[i].header, infos[0].handle(), pending, prepare);
    pending.Wait();
    if (!again.status.ok()) return from_grpc_status(again.status);
    made[base + i] = again.reply.resident().handle();
    if (!release({&infos[i].handle(), 1}, prepare).ok()) made.push_back(infos[i].handle());
    infos[i] = again.reply.resident();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::ResidentInfo>> StripedTransfer::put(
    std::span<const Source> sources, std::vector<std::string>& made, const Prepare& prepare,
    const std::string& colocate_with) {
  std::vector<v1::ResidentInfo> infos;
  if (absl::Status s = create_all(sources, infos, made, prepare, colocate_with); !s.ok()) return s;
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
  RangeCalls calls;
  calls.method = kWriteRange;
  calls.request = [&](const Range& r) {
    // The range is sent from the source's own bytes (range_wire.h); they outlive the call.
    return write_range_request(handles[r.item], r.offset,
                               sources[r.item].bytes.substr(static_cast<std::size_t>(r.offset),
                                                            static_cast<std::size_t>(r.length)));
  };
  calls.done = [](const Range&, const grpc::ByteBuffer&) { return absl::OkStatus(); };
  if (absl::Status s = run(split(sizes), calls, prepare); !s.ok()) return s;
  return infos;
}

absl::Status StripedTransfer::get(std::span<const Sink> sinks, const Prepare& prepare) {
  std::vector<std::int64_t> sizes;
  for (const Sink& s : sinks) sizes.push_back(static_cast<std::int64_t>(s.out.size()));
  RangeCalls calls;
  calls.method = kReadRange;
  calls.request = [&](const Range& r) {
    v1::ReadRangeRequest request;
    request.set_handle(sinks[r.item].handle);
    request.set_offset(r.offset);
    request.set_length(r.length);
    const std::string bytes = request.SerializeAsString();
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
  };
  calls.done = [&](const Range& r, const grpc::ByteBuffer& reply) {
    // Straight from the received slices into the caller's buffer (range_wire.h).
    return read_range_reply_into(reply,
                                 sinks[r.item].out.subspan(static_cast<std::size_t>(r.offset),
                                                           static_cast<std::size_t>(r.length)));
  };
  return run(split(sizes), calls, prepare);
}

}  // namespace matserve::client
